"""The whole book as one PDF (`collapse book --pdf`): every page printed in reading order by
the headless Chromium the browser test uses, joined, with bookmarks and a contents page.

Printing the built site, not a LaTeX build, keeps one source of truth for the look: the
theme's print styles hide the sidebars and buttons, MathJax typesets the math as on screen
(the page is printed only once it has, and refused if TeX is left), and figures are the
site's own images. Links between pages become jumps within the PDF; links to the site's
other files are dropped (their address died with the local server), links out are kept.
Page numbers are stamped at the foot of every page so the printed contents can be used.
"""

from __future__ import annotations

import functools
import html
import http.server
import io
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..atomic import atomic_path
from ..checks import ParameterError

__all__ = [
    "CHROMIUM",
    "CHROMIUM_ARGS",
    "HOST",
    "RAW_MATH",
    "PdfResult",
    "require",
    "serve",
    "reading_order",
    "write_pdf",
]

CHROMIUM = Path("/usr/bin/chromium")  # Debian's; Playwright's own download cannot work offline
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Docker gives a container 64 MB of /dev/shm, where Chromium keeps its shared memory: a
    # long page crashes it there (CI runs in containers); /tmp has room
    "--disable-dev-shm-usage",
]
HOST = "127.0.0.1"
# TeX a reader should never see: display or inline delimiters, environments, a command right
# after a dollar, a text-font command (a bibliography entry pybtex did not translate).
RAW_MATH = re.compile(
    r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$\\[A-Za-z]|\\(texttt|textbf|textit|emph)\b"
)
PAGE = {
    "format": "A4",
    "print_background": True,
    "margin": {"top": "16mm", "bottom": "18mm", "left": "14mm", "right": "14mm"},
}
SOURCE_SUFFIXES = (".md", ".ipynb", ".rst")  # a _toc.yml file may name its source's suffix
READY_MS = 60_000  # MathJax, images and fonts of one page; a build that needs more is broken

# Runs in each page before it is printed: waits for what a reader would wait for, puts the
# chapter's number on the theme's print title (as on screen: "1. Masked attention ..."), makes
# every id of the page a PDF destination (Chromium writes one only for an id that a link on
# the same page targets) and returns what the page shows.
PREPARE = """async (timeoutMs) => {
  const ready = (async () => {
    await Promise.all(Array.from(document.images).map(i => {
      i.loading = "eager";
      return i.decode().catch(() => null);
    }));
    const startup = window.MathJax && MathJax.startup;
    if (startup && startup.promise) await startup.promise;
    await document.fonts.ready;
    return true;
  })();
  const done = await Promise.race(
    [ready, new Promise(r => setTimeout(() => r(false), timeoutMs))]);
  const heading = document.querySelector("article.bd-article h1") || document.querySelector("h1");
  const number = heading && heading.querySelector(".section-number");
  const printed = document.querySelector("#jb-print-docs-body h1");
  if (number && printed && !printed.querySelector(".section-number"))
    printed.prepend(number.cloneNode(true));
  const targets = document.createElement("div");
  targets.hidden = true;
  for (const e of document.querySelectorAll("body [id]")) {
    const a = document.createElement("a");
    a.href = "#" + e.id;
    targets.append(a);
  }
  document.body.append(targets);
  const skip = "pre, code, script, style, noscript, mjx-container, .highlight, textarea";
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT,
    {acceptNode: n => n.parentElement.closest(skip)
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  const text = [];
  while (walker.nextNode()) text.push(walker.currentNode.nodeValue);
  let title = document.title;
  if (heading) {
    const copy = heading.cloneNode(true);
    copy.querySelectorAll(".headerlink").forEach(e => e.remove());
    title = copy.textContent;
  }
  return {
    ready: done,
    title: title.replace(/\\s+/g, " ").trim(),
    text: text.join(" "),
    tex_errors: Array.from(document.querySelectorAll("mjx-merror"))
      .map(e => e.getAttribute("data-mjx-error") || e.textContent),
    broken_images: Array.from(document.images)
      .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.currentSrc || i.src),
  };
}"""

CONTENTS_STYLE = """
body { font-family: sans-serif; font-size: 12pt; margin: 0; }
h1 { font-size: 24pt; font-weight: normal; margin: 0 0 0.4em; }
h2 { font-size: 17pt; font-weight: normal; margin: 0 0 1em; }
h3 { font-size: 12pt; margin: 1.3em 0 0.4em; break-after: avoid; }
a { display: flex; align-items: baseline; color: inherit; text-decoration: none;
    margin: 0.3em 0; break-inside: avoid; }
a .fill { flex: 1 0 2em; border-bottom: 1px dotted #888; margin: 0 0.5em; }
a span:last-child { min-width: 2em; text-align: right; }
"""
NUMBERS_STYLE = """
@page { size: A4; margin: 0; }
body { margin: 0; }
div { height: 296mm; position: relative; }
div:not(:last-child) { break-after: page; }
span { position: absolute; bottom: 8mm; width: 100%; text-align: center;
       font: 9pt sans-serif; color: #555; }
"""


@dataclass(frozen=True)
class PdfResult:
    """The written PDF: its path, its number of pages, and each book page's title with the
    PDF page it starts on (1-based, as the contents page prints it)."""

    path: Path
    pages: int
    contents: list[tuple[str, int]]


@dataclass(frozen=True)
class _Printed:
    name: str  # the page's html path in the site
    title: str
    pdf: bytes


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve `folder` over HTTP on 127.0.0.1 at a free port, threaded and without a log line
    per request (a site is read over HTTP, not file://); yields its base URL."""
    server = http.server.ThreadingHTTPServer(
        (HOST, 0), functools.partial(_QuietHandler, directory=str(folder))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _entries(items: list) -> Iterator[str]:
    """The html paths of a list of _toc.yml entries and of their sections, depth first."""
    for item in items or []:
        if "file" in item:
            name = str(item["file"])
            if Path(name).suffix in SOURCE_SUFFIXES:
                name = name.rsplit(".", 1)[0]
            yield f"{name}.html"
        yield from _entries(item.get("sections"))


def _parts(root: Path) -> list[tuple[str | None, list[str]]]:
    """_toc.yml as (part caption, its pages); the root page and a book without parts come
    with caption None."""
    import yaml

    path = root / "_toc.yml"
    if not path.is_file():
        raise ParameterError(f"no _toc.yml in {root}: the PDF follows the book's contents")
    toc = yaml.safe_load(path.read_text())
    parts = [(None, list(_entries([{"file": toc["root"]}])))]
    if toc.get("chapters"):
        parts.append((None, list(_entries(toc["chapters"]))))
    for part in toc.get("parts") or []:
        parts.append((part.get("caption"), list(_entries(part.get("chapters")))))
    return parts


def reading_order(root: Path) -> list[str]:
    """The html paths of the book's pages in the order of its _toc.yml: the root page, then
    each part's chapters (and their sections)."""
    return [name for _, names in _parts(Path(root)) for name in names]


def require():
    """Playwright's sync API and pypdf, once Chromium is known to be there; else one line
    saying what to install (`collapse book --pdf` asks before any notebook runs)."""
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing.append("playwright")
    try:
        import pypdf
    except ImportError:
        missing.append("pypdf")
    if missing:
        raise ParameterError(
            f"the PDF needs the Python package {' and '.join(missing)}: "
            "pip install 'collapse[pdf]'"
        )
    if not CHROMIUM.is_file():
        raise ParameterError(
            f"the PDF needs Chromium at {CHROMIUM}: run `make browser` (Debian's chromium package)"
        )
    return sync_playwright, pypdf


def _local_only(route) -> None:
    """Nothing leaves 127.0.0.1: the book reads offline, and a request out would only stall."""
    url = route.request.url
    if urlsplit(url).hostname == HOST or url.startswith(("data:", "blob:")):
        route.continue_()
    else:
        route.abort()


def _print_page(browser, base: str, name: str) -> _Printed:
    page = browser.new_page()
    try:
        page.route("**/*", _local_only)
        page.emulate_media(media="print", color_scheme="light")
        page.goto(base + name, wait_until="load")
        seen = page.evaluate(PREPARE, READY_MS)
        problems = [f"image not decoded: {src}" for src in seen["broken_images"]]
        problems += [f"TeX error: {error}" for error in seen["tex_errors"]]
        for match in RAW_MATH.finditer(seen["text"]):
            around = seen["text"][max(0, match.start() - 30) : match.end() + 30]
            problems.append(f"math left as TeX: ...{' '.join(around.split())}...")
        if not seen["ready"]:
            problems.append(f"math, images or fonts not ready after {READY_MS // 1000} s")
        if problems:
            raise ParameterError(f"{name}: {problems[0]} (not printed)")
        return _Printed(name, seen["title"], page.pdf(**PAGE))
    finally:
        page.close()


def _print_html(browser, markup: str, **options) -> bytes:
    page = browser.new_page()
    try:
        page.emulate_media(media="print", color_scheme="light")
        page.set_content(markup, wait_until="load")
        return page.pdf(**options)
    finally:
        page.close()


def _contents_html(book_title: str, parts: list, titles: dict, first: dict, base: str) -> str:
    lines = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<style>{CONTENTS_STYLE}</style></head><body>",
        f"<h1>{html.escape(book_title)}</h1><h2>Contents</h2>",
    ]
    for caption, names in parts:
        if caption:
            lines.append(f"<h3>{html.escape(caption)}</h3>")
        lines += [
            f"<a href='{base}{html.escape(name)}'><span>{html.escape(titles[name])}</span>"
            f"<span class='fill'></span><span>{first[name]}</span></a>"
            for name in names
        ]
    return "\n".join(lines + ["</body></html>"])


def _contents(browser, pypdf, book_title: str, parts: list, readers: list, base: str):
    """The contents page(s), rendered until the page numbers they print account for their
    own length; returns its PDF reader and each page's first page (1-based)."""
    titles = {printed.name: printed.title for printed, _ in readers}
    length = 1
    for _ in range(4):  # the count settles at once unless wider numbers add a page
        first, at = {}, length + 1
        for printed, reader in readers:
            first[printed.name] = at
            at += len(reader.pages)
        markup = _contents_html(book_title, parts, titles, first, base)
        reader = pypdf.PdfReader(io.BytesIO(_print_html(browser, markup, **PAGE)))
        if len(reader.pages) == length:
            break
        length = len(reader.pages)
    return reader, first


def _links(page, name: str, base: str, book: set) -> Iterator[tuple[list, object]]:
    """A printed page's links as (rect, target): a URL out of the book, or (page name, named
    destination or None for its top). Links to other files of the site are dropped."""
    for annotation in page.get("/Annots") or []:
        annotation = annotation.get_object()
        if annotation.get("/Subtype") != "/Link":
            continue
        rect = [float(x) for x in annotation["/Rect"]]
        action = annotation.get("/A") or {}
        if "/Dest" in annotation:
            yield rect, (name, str(annotation["/Dest"]))
        elif action.get("/S") == "/URI":
            url = str(action["/URI"])
            if not url.startswith(base):
                yield rect, url
                continue
            parts = urlsplit(url)
            target = unquote(parts.path).lstrip("/")
            if target in book:
                yield rect, (target, f"/{unquote(parts.fragment)}" if parts.fragment else None)


def _join(pypdf, docs: list, parts: list, titles: dict, base: str, numbers) -> object:
    """One writer: the documents' pages in order, their links resolved across documents, the
    bookmarks and the page numbers."""
    from pypdf.annotations import Link
    from pypdf.generic import Fit

    writer = pypdf.PdfWriter()
    start, dests, links = {}, {}, []
    book = {name for name, _ in docs}
    for name, reader in docs:
        start[name] = len(writer.pages)
        dests[name] = {
            str(key): (reader.get_destination_page_number(d), d.left, d.top)
            for key, d in reader.named_destinations.items()
        }
        for page in reader.pages:
            links += [(len(writer.pages), *link) for link in _links(page, name, base, book)]
            writer.add_page(page, excluded_keys=("/Annots",))
    for index, rect, target in links:
        if isinstance(target, str):
            link = Link(rect=rect, url=target)
        else:
            name, key = target
            at, left, top = dests[name].get(key, (0, None, None))
            fit = Fit.fit() if top is None else Fit.xyz(left=left, top=top)
            link = Link(rect=rect, target_page_index=start[name] + at, fit=fit)
        writer.add_annotation(index, link)
    for caption, names in parts:
        parent = None
        if caption and names:
            parent = writer.add_outline_item(title=caption, page_number=start[names[0]])
        for name in names:
            writer.add_outline_item(title=titles[name], page_number=start[name], parent=parent)
    for page, number in zip(writer.pages, numbers.pages, strict=True):
        page.merge_page(number)
    return writer


def _book_title(root: Path) -> str:
    import yaml

    config = root / "_config.yml"
    title = yaml.safe_load(config.read_text()).get("title") if config.is_file() else None
    return title or "The book"


def write_pdf(
    root: Path,
    html_dir: Path | None = None,
    out: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> PdfResult:
    """Print the built book in `html_dir` (default root/_build/html) page by page in reading
    order and write it as one PDF to `out` (default html_dir/book.pdf, so the site offers it),
    atomically.

    progress, if given, is called with a line as each page starts printing and one per later
    step: the whole book takes minutes.
    """
    say = progress or (lambda line: None)
    root = Path(root)
    html_dir = Path(html_dir) if html_dir else root / "_build" / "html"
    out = Path(out) if out else html_dir / "book.pdf"
    sync_playwright, pypdf = require()
    parts = _parts(root)
    book_title = _book_title(root)
    names = [name for _, group in parts for name in group]
    missing = [name for name in names if not (html_dir / name).is_file()]
    if missing:
        raise ParameterError(
            f"no built book in {html_dir} (no {missing[0]}): run `collapse book` first"
        )
    with serve(html_dir) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            printed = []
            for number, name in enumerate(names, start=1):
                say(f"pdf: page {number} of {len(names)}, {name}")
                printed.append(_print_page(browser, base, name))
            readers = [(p, pypdf.PdfReader(io.BytesIO(p.pdf))) for p in printed]
            say("pdf: the contents and the page numbers")
            contents, first = _contents(browser, pypdf, book_title, parts, readers, base)
            total = len(contents.pages) + sum(len(r.pages) for _, r in readers)
            numbers = "".join(f"<div><span>{n}</span></div>" for n in range(1, total + 1))
            stamps = _print_html(
                browser,
                f"<!DOCTYPE html><style>{NUMBERS_STYLE}</style>{numbers}",
                format="A4",
                margin={"top": "0", "bottom": "0", "left": "0", "right": "0"},
            )
        finally:
            browser.close()
    titles = {p.name: p.title for p in printed}
    docs = [("", contents)] + [(p.name, reader) for p, reader in readers]
    say(f"pdf: joining {total} pages, with their links and bookmarks")
    writer = _join(pypdf, docs, parts, titles, base, pypdf.PdfReader(io.BytesIO(stamps)))
    writer.add_metadata({"/Title": book_title})
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as partial, partial.open("wb") as stream:
        writer.write(stream)
    return PdfResult(out, len(writer.pages), [(titles[name], first[name]) for name in names])
