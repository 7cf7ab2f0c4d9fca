"""Every page of the built book in a real browser, as a reader offline would see it.

Debian's headless Chromium (packages chromium and chromium-driver; `make test` installs them
as root when missing) driven by Playwright's Python package through `executable_path`:
Playwright's own browser download cannot work offline. The fast-profile book is served
over HTTP on 127.0.0.1 (file:// is not how anyone reads it) and each page is visited once;
the tests below check what was recorded: no console error, no failed request and no
request to another host (the book must read offline: MathJax comes from the site itself),
every image decoded, every notebook figure numbered and captioned, all math typeset by
MathJax with no TeX left in the text, every link within the site answering, each
notebook's source .md and executed .ipynb offered for download, a citation on every page
that states a result, and every verdict on the scoreboard. A screenshot of each page (the
first 1280 x 900 pixels; for the scoreboard also its first claim with its quote and its
extensions) is kept in _build/screenshots/ for a person to look at.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import built_book_root

from collapse import report
from collapse.book import pages, runner
from collapse.book.pdf import CHROMIUM, CHROMIUM_ARGS, HOST, RAW_MATH, serve
from collapse.book.scoreboard import anchor

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
SCREENSHOTS = Path(__file__).resolve().parents[1] / "_build" / "screenshots"
REDIRECT = re.compile(r'<meta http-equiv="refresh"', re.IGNORECASE)
# A page states a result when it has a theorem-like block, a verdicts section or the scoreboard.
STATES_RESULT = (
    ".proof.theorem, .proof.proposition, .proof.lemma, .proof.corollary, "
    "section[id^='verdicts'], section#scoreboard"
)

# What a reader sees of the layout, at the current viewport: where the first verdict is, how
# each figure is shown against its drawn size, what is wider than its column, the text of the
# cell outputs and of the tables, the verdict rows of the at-a-glance table and the scoreboard.
LAYOUT = """
const layout = () => {
  const column = document.querySelector("article.bd-article") || document.body;
  const columnWidth = column.getBoundingClientRect().width;
  const top = e => e.getBoundingClientRect().top + window.scrollY;
  const scrolls = e => {
    for (let a = e.parentElement; a && a !== column; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if ((o === "auto" || o === "scroll") && a.getBoundingClientRect().width <= columnWidth + 1)
        return true;
    }
    return false;
  };
  // The first verdict a reader meets: the at-a-glance table's first row, else the first
  // verdict printed by a cell ("Verdict ...").
  const first = document.querySelector(".verdict-glance tbody tr") ||
    Array.from(document.querySelectorAll(".cell_output strong"))
      .find(e => e.textContent.startsWith("Verdict"));
  return {
    viewport: [window.innerWidth, window.innerHeight],
    page_overflow: document.documentElement.scrollWidth - window.innerWidth,
    screens: document.documentElement.scrollHeight / window.innerHeight,
    first_verdict: first ? Math.round(top(first)) : null,
    glance: Array.from(document.querySelectorAll(".verdict-glance tbody tr")).map(r => ({
      href: r.querySelector("a")?.getAttribute("href") || "",
      badge: r.querySelector(".sd-badge")?.innerText || ""})),
    verdict_ids: Array.from(document.querySelectorAll("[id^='verdict-']")).map(e => e.id),
    scoreboard: Array.from(document.querySelectorAll(".scoreboard-verdict")).map(v => ({
      href: v.querySelector("a")?.getAttribute("href") || "",
      badge: v.querySelector(".sd-badge")?.innerText || ""})),
    shown: Array.from(column.querySelectorAll("img")).map(i => ({
      src: i.currentSrc || i.src,
      // the width it was drawn for: declared by the page (a 2x image), else its pixels
      drawn: parseFloat(i.style.width) || Number(i.getAttribute("width")) || i.naturalWidth,
      shown: i.getBoundingClientRect().width,
      linked: !!i.closest("a[href]")})),
    wide_tables: Array.from(column.querySelectorAll("table"))
      .filter(t => t.getBoundingClientRect().width > columnWidth + 1)
      .map(t => ({head: (t.querySelector("th") || t).innerText.slice(0, 40),
                  width: Math.round(t.getBoundingClientRect().width),
                  column: Math.round(columnWidth), scrolls: scrolls(t)})),
    // a table (or anything but code) that fits its column only by scrolling inside its box
    scrolled_boxes: Array.from(column.querySelectorAll("*"))
      .filter(e => e.tagName !== "PRE" && !e.closest("pre, .highlight, mjx-container"))
      .filter(e => ["auto", "scroll"].includes(getComputedStyle(e).overflowX))
      .filter(e => e.scrollWidth > e.clientWidth + 1 && e.getBoundingClientRect().width > 0)
      .map(e => ({head: (e.querySelector("th") || e).innerText.trim().slice(0, 40),
                  width: e.scrollWidth, box: e.clientWidth})),
    wide_code: Array.from(column.querySelectorAll("pre"))
      .filter(e => e.scrollWidth > e.clientWidth + 1 && e.getBoundingClientRect().width > 0)
      .map(e => e.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a), "")
        .slice(0, 60)),
    outputs: Array.from(document.querySelectorAll(".cell_output")).map(o => o.textContent)
      .join("\\n"),
    tables: Array.from(column.querySelectorAll("table")).map(t => ({
      head: Array.from(t.querySelectorAll("thead th")).map(c => c.innerText.trim()),
      rows: Array.from(t.querySelectorAll("tbody tr"))
        .map(r => Array.from(r.cells).map(c => c.innerText.trim()))})),
  };
};"""

# Runs in the page once MathJax has typeset it and its fonts have loaded: what a reader sees.
INSPECT = (
    """async (statesResult) => {""" + LAYOUT + """
  await Promise.all(Array.from(document.images).map(i => i.decode().catch(() => null)));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await document.fonts.ready;
  const skip = "pre, code, script, style, noscript, mjx-container, .highlight, textarea";"""
    """  // code may show TeX on purpose
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT,
    {acceptNode: n => n.parentElement.closest(skip)"""
    """ ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  const text = [];
  while (walker.nextNode()) text.push(walker.currentNode.nodeValue);
  return {
    text: text.join(" "),
    math: document.querySelectorAll(".math").length,
    typeset: document.querySelectorAll("mjx-container").length,
    tex_errors: Array.from(document.querySelectorAll("mjx-merror"))"""
    """.map(e => e.getAttribute("data-mjx-error") || e.textContent),
    images: Array.from(document.images)"""
    """.map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0})),
    figures: Array.from(document.querySelectorAll("figure"))"""
    """.map(f => f.querySelector("figcaption .caption-number")?.innerText || ""),
    links: Array.from(document.querySelectorAll("a[href]")).map(a => a.href.split("#")[0]),
    states_result: !!document.querySelector(statesResult),
    cites: document.querySelectorAll(".bibtex-citation").length,
    title: document.title,
    ...layout(),
  };
}"""
)


@dataclass
class Visit:
    """What one page did in the browser, and what it showed."""

    console_errors: list = field(default_factory=list)
    failed_requests: list = field(default_factory=list)
    seen: dict = field(default_factory=dict)
    phone: dict = field(default_factory=dict)  # what the page shows at PHONE
    model_height: int = 0  # pixels of the chapter's "Model" section (0: the page has none)


@dataclass
class Browsed:
    """The whole site as browsed: each page's visit, and each link within the site with its HTTP
    status and body.
    """

    root: Path
    base: str
    pages: dict
    answers: dict

    def problems(self, check) -> str:
        """One line per problem that `check(visit)` lists, over every page ('' when
        there is none).
        """
        return "\n".join(
            f"{name}: {problem}" for name, visit in self.pages.items() for problem in check(visit)
        )


def _browser_or_skip():
    """Playwright and Debian's Chromium, or a loud skip (a failure under CI, where
    `make test` installs both).
    """
    missing = []
    if not CHROMIUM.is_file():
        missing.append(
            f"{CHROMIUM} (Debian packages chromium and chromium-driver; "
            "`make test` installs them when run as root)"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing.append("the Python package playwright (pip install -e '.[test]')")
        sync_playwright = None
    if missing:
        message = "BROWSER TEST NOT RUN: missing " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return sync_playwright


@pytest.fixture(scope="module")
def site(request):
    """The built HTML of the fast-profile book, served on 127.0.0.1 (`collapse.book.pdf.serve`).

    With COLLAPSE_BOOK_ROOT set to a project folder whose book is already built (its
    _build/html and book/executed), that book is checked instead of a fresh build: how a
    change to a page is checked in seconds, or an older build shown to fail.
    """
    root = built_book_root(request)
    html = root / "_build" / "html"
    assert html.is_dir(), f"no built book in {html}"
    with serve(html) as base:
        yield root, html, base


def _pages(html: Path) -> list[str]:
    """Every HTML page of the site, relative to its root (not Sphinx's copied sources
    or static files).
    """
    return sorted(
        p.relative_to(html).as_posix()
        for p in html.rglob("*.html")
        if p.relative_to(html).parts[0] not in ("_static", "_sources")
    )


def _offline_only(route, failed: list):
    """Abort (and record) any request that leaves 127.0.0.1: an offline reader would not get it."""
    if urlsplit(route.request.url).hostname == HOST or route.request.url.startswith(
        ("data:", "blob:")
    ):
        route.continue_()
    else:
        failed.append(f"external request {route.request.url}")
        route.abort()


def _visit(context, base: str, html: Path, name: str) -> Visit:
    visit = Visit()
    page = context.new_page()
    page.route("**/*", functools.partial(_offline_only, failed=visit.failed_requests))
    page.on(
        "console",
        lambda msg: visit.console_errors.append(msg.text) if msg.type == "error" else None,
    )
    page.on("pageerror", lambda err: visit.console_errors.append(f"uncaught {err}"))
    page.on(
        "requestfailed", lambda req: visit.failed_requests.append(f"{req.url} ({req.failure})")
    )
    page.on(
        "response",
        lambda r: (
            visit.failed_requests.append(f"{r.url} (HTTP {r.status})") if r.status >= 400 else None
        ),
    )
    _open(page, base, html, name)
    visit.seen = page.evaluate(INSPECT, STATES_RESULT)
    shot = SCREENSHOTS / name.replace("/", "__").removesuffix(".html")
    page.screenshot(path=f"{shot}.png")
    model = page.query_selector("section#model")
    if model is not None:  # a chapter: its model code (and 01's masks) for a person to look at
        box = model.bounding_box()
        scrolled = page.evaluate("window.scrollY")
        clip = {**box, "y": box["y"] + scrolled}  # page coordinates: no sticky header inside
        page.screenshot(path=f"{shot}__model.png", full_page=True, clip=clip)
        visit.model_height = int(box["height"])
    # the scoreboard below its first screen: the first claim with its quote, the extensions
    for part, selector in (
        ("claim", ".scoreboard-verdict"),
        ("extensions", "#extensions-our-own-questions"),
    ):
        found = page.query_selector(selector) if name.endswith("scoreboard.html") else None
        if found is not None:
            top = found.bounding_box()["y"] + page.evaluate("window.scrollY")
            clip = {"x": 0, "y": top, **DESKTOP}
            page.screenshot(path=f"{shot}__detail-{part}.png", full_page=True, clip=clip)
    visit.phone = _look_at_phone_width(page, shot)
    page.close()
    return visit


def _open(page, base: str, html: Path, name: str) -> None:
    page.goto(base + name, wait_until="load")
    if REDIRECT.search((html / name).read_text()):  # index.html forwards to the first page
        page.wait_for_url(lambda url: url != base + name, wait_until="load")


def _look_at_phone_width(page, shot: Path) -> dict:
    """The same page narrowed to a phone's width, laid out again there (kept as
    {shot}.phone.png): one load and one typesetting per page, not two.
    """
    page.set_viewport_size(PHONE)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    seen = page.evaluate(INSPECT, STATES_RESULT)
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=f"{shot}.phone.png")
    return seen


@pytest.fixture(scope="module")
def browsed(site, tmp_path_factory) -> Browsed:
    """Visit every page once in headless Chromium (a fresh profile), then request every link
    within the site.
    """
    sync_playwright = _browser_or_skip()
    root, html, base = site
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport=DESKTOP,
        )
        try:
            pages = {name: _visit(context, base, html, name) for name in _pages(html)}
            links = sorted(
                {link for v in pages.values() for link in v.seen["links"] if link.startswith(base)}
            )
            answers = {
                link.removeprefix(base): (r.status, r.body())
                for link in links
                for r in [context.request.get(link)]
            }
        finally:
            context.close()
    return Browsed(root, base, pages, answers)


def test_every_page_was_visited(browsed):
    expected = {f"book/executed/{name}.html" for name in runner.Project(browsed.root).notebooks()}
    expected |= {
        "index.html",
        "book/intro.html",
        "book/reproduce.html",
        "book/executed/scoreboard.html",
    }
    assert expected <= set(browsed.pages), sorted(expected - set(browsed.pages))
    parts = ("__model", "__detail-")  # a part of a page, beside its first screen
    shots = [p for p in SCREENSHOTS.glob("*.png") if not any(x in p.stem for x in parts)]
    assert len([p for p in shots if not p.stem.endswith(".phone")]) == len(browsed.pages)
    assert len([p for p in shots if p.stem.endswith(".phone")]) == len(browsed.pages)


def test_no_console_errors(browsed):
    problems = browsed.problems(lambda v: v.console_errors)
    assert not problems, problems


def test_no_failed_or_external_requests(browsed):
    problems = browsed.problems(lambda v: v.failed_requests)
    assert not problems, problems


def test_every_image_has_a_size(browsed):
    problems = browsed.problems(
        lambda v: [f"image not decoded: {i['src']}" for i in v.seen["images"] if not i["ok"]]
    )
    assert not problems, problems
    assert sum(len(v.seen["images"]) for v in browsed.pages.values()) >= len(
        runner.Project(browsed.root).notebooks()
    )


def test_notebook_figures_are_numbered_within_their_chapter_and_captioned(browsed):
    for name in runner.Project(browsed.root).notebooks():
        figures = browsed.pages[f"book/executed/{name}.html"].seen["figures"]
        assert figures, f"{name}: no figure"
        numbered = rf"Fig\. {int(name[:2])}\.\d+"
        assert all(re.match(numbered, number) for number in figures), (
            f"{name}: a figure not numbered as {numbered} with a caption: {figures}"
        )


def _chapters(browsed):
    for name in runner.Project(browsed.root).notebooks():
        yield name, browsed.pages[f"book/executed/{name}.html"]


def test_verdicts_come_first_at_a_glance(browsed):
    """Right under the title, within the first 1.5 screens at both widths: one row per verdict
    of the chapter, with its outcome badge, linking to the verdict below."""
    records = runner.collect_records(runner.Project(browsed.root))
    problems = []
    for name, visit in _chapters(browsed):
        mine = [r for r in records if r["notebook"] == name]
        for seen in (visit.seen, visit.phone):
            width, height = seen["viewport"]
            if seen["first_verdict"] is None or seen["first_verdict"] > 1.5 * height:
                problems.append(
                    f"{name} at {width} px: first verdict at {seen['first_verdict']} px, "
                    f"{(seen['first_verdict'] or 0) / height:.1f} screens down (at most 1.5)"
                )
        rows = visit.seen["glance"]
        expected = [(f"#{anchor(r)}", report.outcome(r).replace("-", " ")) for r in mine]
        if [(row["href"], row["badge"]) for row in rows] != expected:
            problems.append(f"{name}: at-a-glance rows {rows}, expected {expected}")
        missing = {anchor(r) for r in mine} - set(visit.seen["verdict_ids"])
        if missing:
            problems.append(f"{name}: no anchor for {sorted(missing)}")
    assert not problems, "\n".join(problems)


# On a phone a figure is shown at least this wide (CSS px), in a box that scrolls sideways.
PHONE_FIGURE = 560


def test_figures_are_shown_at_their_drawn_size(browsed):
    """At 1280 px no figure is shrunk below 1/1.5 of the width it was drawn for (its text
    would fall under ~9 px); at 390 px a figure keeps PHONE_FIGURE px (or its drawn width),
    so that its 9-10 pt text stays about 8 px or more; each links to its full-resolution
    image."""

    def check(visit):
        for image in visit.seen["shown"]:
            if image["drawn"] and image["shown"] < image["drawn"] / 1.5:
                yield (
                    f"figure shown at {image['shown']:.0f} px of its {image['drawn']} px: "
                    f"{image['src'].rsplit('/', 1)[-1]}"
                )
        for image in (i for i in visit.phone["shown"] if "_images/" in i["src"]):
            name = image["src"].rsplit("/", 1)[-1]
            if not image["linked"]:
                yield f"figure not linked to its full image: {name}"
            if image["shown"] < min(image["drawn"], PHONE_FIGURE) - 1:
                yield f"at 390 px figure shown at {image['shown']:.0f} px, text under 8 px: {name}"

    problems = browsed.problems(lambda v: list(check(v)))
    assert not problems, problems


def test_tables_and_code_fit_their_column(browsed):
    """At 1280 px no table or code block is wider than the text column; at 390 px the page
    itself never scrolls sideways and a wide table scrolls inside its own box."""

    def check(visit):
        for table in visit.seen["wide_tables"]:
            yield f"table {table['head']!r}: {table['width']} px in a {table['column']} px column"
        for box in visit.seen["scrolled_boxes"]:
            yield f"{box['head']!r} scrolls sideways: {box['width']} px in a {box['box']} px box"
        yield from (f"code line runs off its box: {line!r}" for line in visit.seen["wide_code"])
        yield from (
            f"at 390 px code line runs off its box: {line!r}" for line in visit.phone["wide_code"]
        )
        if visit.phone["page_overflow"] > 1:
            yield f"at 390 px the page scrolls sideways by {visit.phone['page_overflow']} px"
        for table in visit.phone["wide_tables"]:
            if not table["scrolls"]:
                yield f"at 390 px table {table['head']!r} is cut off, not in a scrolling box"

    problems = browsed.problems(lambda v: list(check(v)))
    assert not problems, problems


# A table cell whose value was cut short (pandas shortens long values with an ellipsis).
TRUNCATED = re.compile(r"(…|\.\.\.)$")


def _table_problems(table) -> list[str]:
    head, rows = table["head"], table["rows"]
    found = []
    if head and not head[0]:
        found.append(f"a table with an unnamed index column: {head}")
    found += [f"a snake_case column name {h!r}" for h in head if re.fullmatch(r"[a-z]+_\w+", h)]
    found += [
        f"a truncated cell {cell!r}" for row in rows for cell in row if TRUNCATED.search(cell)
    ]
    found += [f"a NaN cell in {head}" for row in rows for cell in row if cell in ("nan", "NaN")]
    return found


def test_no_raw_artefacts(browsed):
    """No warning, local path, object repr, long float, machine timing, progress bar or NaN in
    what the cells show; no index column, snake_case header or truncated cell in a table; no
    emoji (a reader without an emoji font sees empty boxes); no TeX in the page title."""

    def check(visit):
        seen = visit.seen
        for what, pattern in pages.ARTEFACTS.items():
            for match in pattern.finditer(seen["outputs"]):
                yield f"{what} in an output: {match.group(0)!r}"
        for match in pages.ARTEFACTS["a timing of this machine"].finditer(seen["text"]):
            yield f"a timing of this machine in the text: {match.group(0)!r}"
        for match in pages.EMOJI.finditer(seen["text"] + seen["outputs"]):
            yield f"an emoji {match.group(0)!r}"
        for table in seen["tables"]:
            yield from _table_problems(table)
        if re.search(r"[$\\]", seen["title"]):
            yield f"TeX in the page title {seen['title']!r}"

    problems = browsed.problems(lambda v: list(check(v)))
    assert not problems, problems


def test_math_is_typeset(browsed):
    def check(visit):
        seen = visit.seen
        if seen["typeset"] < seen["math"]:
            yield f"{seen['math']} math elements but {seen['typeset']} typeset by MathJax"
        yield from (f"TeX error: {e}" for e in seen["tex_errors"])
        for match in RAW_MATH.finditer(seen["text"]):
            yield (
                "raw TeX in the text: "
                f"...{seen['text'][max(0, match.start() - 40) : match.end() + 40]}..."
            )

    problems = browsed.problems(lambda v: list(check(v)))
    assert not problems, problems
    assert browsed.pages["book/intro.html"].seen["typeset"] > 0


def test_every_link_within_the_site_answers(browsed):
    broken = {link: status for link, (status, _) in browsed.answers.items() if status >= 400}
    assert not broken, broken


def test_notebook_pages_offer_their_source_and_executed_notebook(browsed):
    """The theme's download button gives the executed .ipynb; {download} links under the
    opening text give the MyST source, the executed notebook and the verdict records.
    """
    for name in runner.Project(browsed.root).notebooks():
        links = browsed.pages[f"book/executed/{name}.html"].seen["links"]
        for suffix, looks_right in (
            (".md", lambda body: body.startswith(b"---\njupytext:")),
            (".ipynb", lambda body: "cells" in json.loads(body)),
            (".verdicts.json", lambda body: isinstance(json.loads(body), list)),
        ):
            offered = [  # within the site: the Colab and Binder buttons name .ipynb files too
                link.removeprefix(browsed.base)
                for link in links
                if link.startswith(browsed.base) and link.endswith(f"/{name}{suffix}")
            ]
            assert offered, f"{name}: no link to download {name}{suffix}"
            assert all(looks_right(browsed.answers[link][1]) for link in offered), (
                f"{name}: {offered} is not the {suffix} notebook"
            )


def test_every_page_that_states_a_result_cites(browsed):
    problems = browsed.problems(
        lambda v: (
            ["states a result but cites nothing"]
            if v.seen["states_result"] and not v.seen["cites"]
            else []
        )
    )
    assert not problems, problems


# A chapter should read in about 15 desktop screens; the longest are near 31 today (prose,
# figures, tables and the verdicts with their quotes): none may grow past this until shortened.
MAX_SCREENS = 36


def test_chapters_are_a_readable_length(browsed):
    """Each chapter's height at 1280 x 900, in screens, written beside the screenshots; a
    chapter longer than MAX_SCREENS fails."""
    heights = {
        name: browsed.pages[f"book/executed/{name}.html"].seen["screens"]
        for name in runner.Project(browsed.root).notebooks()
    }
    lines = [f"{name}  {screens:5.1f} screens" for name, screens in heights.items()]
    (SCREENSHOTS / "heights.txt").write_text("\n".join(lines) + "\n")
    too_long = [line for line in lines if float(line.split()[1]) > MAX_SCREENS]
    assert not too_long, too_long


def test_every_chapter_shows_its_model(browsed):
    for name in runner.Project(browsed.root).notebooks():
        visit = browsed.pages[f"book/executed/{name}.html"]
        assert visit.model_height > 200, f"{name}: no visible Model section"


def test_scoreboard_lists_every_verdict(browsed):
    """Once each, with its outcome badge, linking to its verdict in its chapter."""
    records = runner.collect_records(runner.Project(browsed.root))
    page = browsed.pages["book/executed/scoreboard.html"].seen
    listed = {row["href"]: row["badge"] for row in page["scoreboard"]}
    assert records and len(page["scoreboard"]) == len(records) == len(listed)
    for record in records:
        href = f"{record['notebook']}.html#{anchor(record)}"
        assert listed.get(href) == report.outcome(record).replace("-", " "), (href, listed)
