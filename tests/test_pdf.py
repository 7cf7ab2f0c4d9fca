"""The whole-book PDF: pages in the order of _toc.yml, bookmarks under the part captions, a
contents page whose page numbers are right, text a reader can search and math typeset.

A small hand-written site checks the mechanics in seconds (links become jumps within the
PDF, page numbers are stamped, untypeset TeX is refused); the built book (COLLAPSE_BOOK_ROOT,
else the session's fast-profile build) is printed once for the rest.
"""

from __future__ import annotations

import html
import os
import re
import unicodedata
from pathlib import Path

import pytest
from conftest import built_book_root

from collapse.book import pdf, runner
from collapse.checks import ParameterError

ROOT = Path(__file__).resolve().parents[1]


def _browser_or_skip():
    """Chromium and the PDF packages, or a loud skip (a failure under CI, which installs them)."""
    try:
        pdf.require()
    except ParameterError as missing:
        message = f"PDF TEST NOT RUN: {missing}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def _flat(outline, depth=0):
    """A pypdf outline as (depth, title, destination) in order."""
    for item in outline:
        if isinstance(item, list):
            yield from _flat(item, depth + 1)
        else:
            yield depth, item.title, item


def _words(text: str) -> str:
    """Text with its whitespace collapsed and ligatures (the "fi" of "fix") spelt out."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def test_reading_order_follows_the_books_toc():
    order = pdf.reading_order(ROOT)
    listed = re.findall(r"^\s*(?:root|- file):\s*(\S+)", (ROOT / "_toc.yml").read_text(), re.M)
    assert order == [f"{name}.html" for name in listed]
    assert order[:2] == ["book/intro.html", "book/executed/scoreboard.html"]
    chapters = {n for n in order if re.fullmatch(r"book/executed/\d\d-.*\.html", n)}
    assert chapters == {f"book/executed/{n}.html" for n in runner.Project(ROOT).notebooks()}


def test_reading_order_of_a_book_without_parts_and_with_sections(tmp_path):
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: intro\nchapters:\n"
        "  - file: a.md\n    sections:\n      - file: sub/b.ipynb\n  - file: notes.v2\n"
    )
    assert pdf.reading_order(tmp_path) == ["intro.html", "a.html", "sub/b.html", "notes.v2.html"]


def test_missing_toc_or_site_is_one_line(tmp_path):
    with pytest.raises(ParameterError, match="no _toc.yml"):
        pdf.reading_order(tmp_path)
    _browser_or_skip()
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\n")
    with pytest.raises(ParameterError, match=r"no built book in .* \(no intro.html\): run"):
        pdf.write_pdf(tmp_path)


def test_chromium_keeps_its_shared_memory_out_of_dev_shm():
    """A container's /dev/shm is 64 MB (Docker's default): Chromium printing a long page there
    crashes, so it is told to use /tmp."""
    assert "--disable-dev-shm-usage" in pdf.CHROMIUM_ARGS


def test_missing_tools_say_what_to_install(monkeypatch):
    monkeypatch.setattr(pdf, "CHROMIUM", Path("/nonexistent/chromium"))
    with pytest.raises(ParameterError, match=r"/nonexistent/chromium: run `make browser`"):
        pdf.require()
    monkeypatch.setitem(__import__("sys").modules, "pypdf", None)
    with pytest.raises(ParameterError, match=r"package pypdf: pip install 'collapse\[pdf\]'"):
        pdf.require()


# A small site: a root page, and a part with a two-page chapter and its section.
SMALL_TOC = """format: jb-book
root: intro
parts:
  - caption: Part one
    chapters:
      - file: one
        sections:
          - file: two
"""
SMALL_PAGES = {
    "intro.html": "<h1>Intro<a class='headerlink' href='#'>#</a></h1>"
    "<p><a href='one.html#later'>later in one</a> <a href='pic.png'>a site file</a> "
    "<a href='https://example.org/'>out</a> <a href='two.html'>two</a></p>",
    "one.html": "<h1><span class='section-number'>1. </span>One</h1>"
    "<div style='height: 1300px'></div><p id='later'>Later</p>",
    "two.html": "<h1>Two</h1><p>Math typeset: none here.</p>",
}


@pytest.fixture
def small_book(tmp_path):
    (tmp_path / "_toc.yml").write_text(SMALL_TOC)
    (tmp_path / "_config.yml").write_text("title: A small book\n")
    site = tmp_path / "_build" / "html"
    site.mkdir(parents=True)
    for name, body in SMALL_PAGES.items():
        (site / name).write_text(f"<!DOCTYPE html><meta charset='utf-8'><body>{body}</body>")
    return tmp_path


def test_small_book(small_book):
    _browser_or_skip()
    from pypdf import PdfReader

    said = []
    result = pdf.write_pdf(small_book, progress=said.append)
    assert said == [
        "pdf: page 1 of 3, intro.html",
        "pdf: page 2 of 3, one.html",
        "pdf: page 3 of 3, two.html",
        "pdf: the contents and the page numbers",
        "pdf: joining 5 pages, with their links and bookmarks",
    ]
    assert result.path == small_book / "_build" / "html" / "book.pdf"
    assert result.contents == [("Intro", 2), ("1. One", 3), ("Two", 5)]
    reader = PdfReader(result.path)
    assert result.pages == len(reader.pages) == 5
    assert reader.metadata.title == "A small book"
    outline = [
        (depth, title, reader.get_destination_page_number(d) + 1)
        for depth, title, d in _flat(reader.outline)
    ]
    assert outline == [(0, "Intro", 2), (0, "Part one", 3), (1, "1. One", 3), (1, "Two", 5)]
    contents = _words(reader.pages[0].extract_text())
    assert contents.startswith("A small book Contents Intro 2 Part one 1. One 3 Two 5")
    for number, page in enumerate(reader.pages, start=1):  # stamped at the foot
        assert page.extract_text().split()[-1] == str(number)

    numbers = {page.indirect_reference.idnum: n for n, page in enumerate(reader.pages, start=1)}

    def links(page_number):
        found = []
        for annotation in reader.pages[page_number - 1].get("/Annots") or []:
            annotation = annotation.get_object()
            if "/Dest" in annotation:
                found.append(numbers[annotation["/Dest"][0].idnum])
            else:
                found.append(annotation["/A"]["/URI"])
        return found

    # the heading's own link; one.html#later on one's second page; the site file's link is
    # gone; the link out stays out
    assert sorted(links(2), key=str) == [2, 4, 5, "https://example.org/"]
    assert links(1) == [2, 3, 5]  # the contents page jumps to each page
    assert not list(small_book.glob("_build/html/.*partial"))


def test_untypeset_math_is_refused(small_book):
    _browser_or_skip()
    (small_book / "_build" / "html" / "two.html").write_text(
        "<!DOCTYPE html><body><h1>Two</h1><p>the bound \\(\\mu(X) \\le 1\\)</p></body>"
    )
    with pytest.raises(ParameterError, match=r"two.html: math left as TeX: .*\\\(\\mu"):
        pdf.write_pdf(small_book)
    assert not (small_book / "_build" / "html" / "book.pdf").exists()


@pytest.fixture(scope="module")
def printed(request, tmp_path_factory):
    """The built book printed once: its root, the result and a pypdf reader of the file."""
    _browser_or_skip()
    from pypdf import PdfReader

    root = built_book_root(request)
    result = pdf.write_pdf(root, out=tmp_path_factory.mktemp("pdf") / "book.pdf")
    return root, result, PdfReader(result.path)


def _title(page: Path) -> str:
    """A built page's title as it reads under the article's first heading (chapter number
    included, the heading's link sign not)."""
    article = page.read_text().split("<article", 1)[1]
    heading = re.search(r"<h1>(.*?)</h1>", article, re.S).group(1)
    heading = re.sub(r"<a class=\"headerlink\".*?</a>", "", heading)
    return _words(html.unescape(re.sub(r"<[^>]+>", "", heading)))


def test_every_page_is_in_the_pdf_in_reading_order(printed):
    root, result, reader = printed
    order = pdf.reading_order(root)
    titles = [_title(root / "_build" / "html" / name) for name in order]
    assert [title for title, _ in result.contents] == titles
    assert result.pages == len(reader.pages) >= len(order) + 1
    firsts = [first for _, first in result.contents]
    assert firsts == sorted(set(firsts)) and firsts[0] == 2  # after the contents page


def test_bookmarks_are_the_parts_with_their_pages(printed):
    root, result, reader = printed
    outline = [
        (depth, title, reader.get_destination_page_number(d) + 1)
        for depth, title, d in _flat(reader.outline)
    ]
    expected = []
    contents = iter(result.contents)
    for caption, names in pdf._parts(root):
        pages = [next(contents) for _ in names]
        if caption:
            expected.append((0, caption, pages[0][1]))
        expected += [(1 if caption else 0, title, first) for title, first in pages]
    assert outline == expected
    toc = (root / "_toc.yml").read_text()
    captions = [c.strip().strip('"') for c in re.findall(r"caption:(.*)", toc)]
    assert captions and [t for d, t, _ in outline if d == 0 and t in captions] == captions


def test_the_contents_page_lists_every_page_with_its_number(printed, read_back):
    _, result, _ = printed
    front = _words(" ".join(text for text, _ in read_back[: result.contents[0][1]]))
    for title, first in result.contents:
        assert f"{title} {first}" in front, f"{title!r} not listed with page {first}"
        start = _words(read_back[first - 1][0])
        assert title in start, f"page {first} does not start {title!r}"


@pytest.fixture(scope="module")
def read_back(printed):
    """Each page's text and the x positions of its text runs, read once (pypdf takes a while):
    a list of (text, xs) in page order."""
    _, _, reader = printed
    pages = []
    for page in reader.pages:
        xs = []

        def visit(text, cm, tm, font, size, xs=xs):
            if text.strip():
                xs.append(tm[4] * cm[0] + tm[5] * cm[2] + cm[4])

        pages.append((page.extract_text(visitor_text=visit), xs))
    return pages


def test_text_is_searchable_and_math_typeset(printed, read_back):
    _, result, reader = printed
    bounds = [first for _, first in result.contents] + [result.pages + 1]
    texts = [
        _words(" ".join(text for text, _ in read_back[start - 1 : end - 1]))
        for start, end in zip(bounds, bounds[1:], strict=False)
    ]
    chapters = [
        (title, text)
        for (title, _), text in zip(result.contents, texts, strict=True)
        if re.match(r"\d+\. ", title)
    ]
    assert chapters
    for title, text in chapters:  # each chapter reads as text, its verdicts included
        assert "Verdicts at a glance" in text and "Verdict" in text.split("Verdicts at a")[1], (
            title
        )
    assert not re.search(r"\$\$|\\\(|\\\[|\\begin\{", " ".join(texts))
    intro = reader.pages[result.contents[0][1] - 1]  # the intro shows math on its first page
    fonts = [f.get_object() for f in intro["/Resources"]["/Font"].values()]
    assert any(f["/Subtype"] == "/Type3" for f in fonts), "no MathJax glyphs on the intro page"


def test_the_print_layout_has_no_sidebars_and_uses_the_page_width(printed, read_back):
    """Each page's text runs from the left margin to near the right one: with a sidebar
    printed beside it, the column would start a third of the way in."""
    _, result, reader = printed
    bounds = [first for _, first in result.contents] + [result.pages + 1]
    for (title, _), start, end in zip(result.contents, bounds, bounds[1:], strict=False):
        xs = [x for _, page_xs in read_back[start - 1 : end - 1] for x in page_xs]
        width = float(reader.pages[start - 1].mediabox.width)
        assert min(xs) < 0.2 * width and max(xs) > 0.7 * width, (title, min(xs), max(xs))
