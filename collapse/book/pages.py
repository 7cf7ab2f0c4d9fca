"""An executed notebook made into a book page: verdicts at a glance under the title, each
verdict drawn with a badge and an anchor, bookkeeping cells off the page; and the
artefacts a page must not show.

`prepare` runs on every executed notebook before the book is built (`collapse book`), from
the verdict records and notebooks/expectations.yml, so that the page's look can change
without executing anything again. It is idempotent. The downloadable notebook keeps every
cell: a removed cell is only tagged `remove-cell`, which the book honours and Jupyter
ignores. Under the opening text, a line offers the page's MyST source, its executed notebook
and its verdict records (JSON); each figure's data is offered beside it (`figdata`).
"""

from __future__ import annotations

import re

from ..atomic import atomic_path
from ..report import METADATA_KEY, outcome
from . import figdata, launch
from .scoreboard import (
    anchor,
    badge,
    glance_claim,
    kind_badge,
    quote_markdown,
    short_reason,
    table_cell,
)

__all__ = [
    "prepare",
    "prepare_all",
    "downloads_markdown",
    "glance_markdown",
    "verdict_markdown",
    "artefacts",
    "ascii_math",
    "unfilled_values",
    "table_rows",
    "ARTEFACTS",
    "EMOJI",
]

GLANCE_TAG = "verdicts-at-a-glance"
TITLE_TAG = "chapter-title"
DOWNLOADS_TAG = "download-links"
# Cells a reader of the page does not need; the downloadable notebook keeps them.
OFF_PAGE_TAGS = ("injected-parameters", "check")
# Hidden checks stay on the page, folded: the reader may see what grading also tests.
FOLDED_TAGS = ("hidden-check",)
# Cells `prepare` writes, dropped and written again on every run.
_GENERATED_TAGS = (GLANCE_TAG, DOWNLOADS_TAG, launch.INSTALL_TAG)
# A table output longer than this many rows scrolls in a box of its own (myst-nb's
# `scroll-output` tag: 24em of it at a time on screen, printed whole), so that a reference
# table does not push the argument several screens down.
LONG_TABLE_ROWS = 12
SCROLL_TAG = "scroll-output"


def verdict_markdown(record: dict) -> str:
    """A verdict as the page shows it: an anchor, its badge, the claim, the sentence of the
    paper it tests, what was measured and what it was held to."""
    quoted = quote_markdown(record)
    return (
        f"({anchor(record)})=\n"
        f"{badge(outcome(record))}{kind_badge(record)} **{record['claim']}** "
        f"(`{record['id']}`)\n\n"
        + (f"{quoted}\n" if quoted else "")
        + f"Measured: {record['measured']}  \nExpected: {record['expected']}\n"
    )


def glance_markdown(records: list[dict], expectations: dict) -> str:
    """The table under a chapter's title: claim (linking to its verdict) with the first line
    of the sentence it tests, outcome, reason."""
    lines = [
        "::::{container} verdict-glance",
        "**Verdicts at a glance.** Each links to its verdict in [Verdicts](#verdicts), under "
        "the paper's sentence it tests; badges say what was tested ({ref}`methods-verdicts`).",
        "",
        "| Claim | Outcome | Reason |",
        "|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {glance_claim(r)} | {badge(outcome(r))}{kind_badge(r)} "
            f"| {table_cell(short_reason(r, expectations))} |"
        )
    lines.append("::::")
    return "\n".join(lines) + "\n"


def _tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def _tag(cell, tag: str) -> None:
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


def _split_title(notebook) -> int:
    """Put the chapter's `# Title` in a cell of its own; return that cell's index."""
    import nbformat

    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "markdown":
            continue
        if TITLE_TAG in _tags(cell):
            return index
        lines = cell.source.splitlines()
        heading = next((i for i, line in enumerate(lines) if line.startswith("# ")), None)
        if heading is None:
            return -1
        rest = "\n".join(lines[heading + 1 :]).strip("\n")
        cell.source = "\n".join(lines[: heading + 1])
        _tag(cell, TITLE_TAG)
        if rest:
            notebook.cells.insert(index + 1, nbformat.v4.new_markdown_cell(rest))
        return index
    return -1


def table_rows(cell) -> int:
    """The body rows of the Markdown tables a code cell shows (`tables.show` draws them)."""
    rows = 0
    for output in cell.get("outputs", []):
        lines = str(output.get("data", {}).get("text/markdown", "")).splitlines()
        table = [line for line in lines if line.lstrip().startswith("|")]
        separators = sum(1 for line in table if set(line.strip()) <= set("|-: "))
        rows += len(table) - 2 * separators  # each table: a header and its separator
    return rows


def downloads_markdown(name: str) -> str:
    """The line offering the page's files. Sphinx's {download} role copies each into the
    built site; book/executed/ pages sit two folders below notebooks/."""
    return (
        "Download this page: "
        f"{{download}}`source notebook ({name}.md) <../../notebooks/{name}.md>` · "
        f"{{download}}`executed notebook ({name}.ipynb) <{name}.ipynb>` · "
        f"{{download}}`verdicts ({name}.verdicts.json) <{name}.verdicts.json>`"
    )


def prepare(
    notebook, records: list[dict], expectations: dict, name: str, install: str | None = None
) -> None:
    """Make the executed notebook `name` a book page, in place (idempotent). With `install`
    (a pip requirement), the notebook starts with a cell that installs it when it is missing.
    """
    import nbformat

    by_key = {r["key"]: r for r in records}
    notebook.cells = [c for c in notebook.cells if not any(t in _tags(c) for t in _GENERATED_TAGS)]
    for cell in notebook.cells:
        if any(t in _tags(cell) for t in OFF_PAGE_TAGS):
            _tag(cell, "remove-cell")
        if any(t in _tags(cell) for t in FOLDED_TAGS):
            _tag(cell, "hide-input")
        for output in cell.get("outputs", []):
            record = output.get("metadata", {}).get(METADATA_KEY)
            if record is not None and record["key"] in by_key:
                output["data"]["text/markdown"] = verdict_markdown(by_key[record["key"]])
        if table_rows(cell) > LONG_TABLE_ROWS:
            _tag(cell, SCROLL_TAG)
    title = _split_title(notebook)
    after = notebook.cells[title + 1 : title + 2]
    opening = title + 1 if after and after[0].cell_type == "markdown" else title
    notebook.cells.insert(
        opening + 1,
        nbformat.v4.new_markdown_cell(
            downloads_markdown(name), metadata={"tags": [DOWNLOADS_TAG]}
        ),
    )
    if records:
        glance = nbformat.v4.new_markdown_cell(
            glance_markdown(records, expectations), metadata={"tags": [GLANCE_TAG]}
        )
        notebook.cells.insert(title + 1, glance)
    if install:
        notebook.cells.insert(
            0,
            nbformat.v4.new_code_cell(
                launch.install_cell(install),
                metadata={"tags": [launch.INSTALL_TAG, "remove-cell"]},
            ),
        )


# What no rendered page may show (see `artefacts`), with what each one is.
ARTEFACTS = {
    "a warning": re.compile(r"\w*Warning\b"),
    "a local path": re.compile(r"(/tmp/|/home/|/work/|/root/|/usr/|site-packages|\.venv/)"),
    "an object repr": re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>|\bat 0x[0-9a-f]{6,}"),
    "a number with too many digits": re.compile(r"\d\.\d{8,}"),
    "a timing of this machine": re.compile(r"on this machine|estimated \d+(\.\d+)? ?s\b"),
    "a progress bar": re.compile(r"\d+%\|.*\||\d+(\.\d+)?it/s\]"),
    "a NaN": re.compile(r"\bnan\b|\bNaN\b"),
}
# ASCII standing in for math in a verdict text or a caption (outside $...$).
_ASCII_MATH = re.compile(
    r"\|\||<=|>=|\bsqrt\(|\bmu\(|\bmu\b|\beps\b|\bsigma_|\bgamma_|\bd_[A-Za-z]{1,3}\b"
    r"|\b\d(\.\d+)?e-\d+\b|\^\d|\blog\("
)
EMOJI = re.compile("[\u2600-\u27bf\U0001f300-\U0001faff\u2b50\u2b55\u2753-\u2755]")
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$]*\$", re.S)


def ascii_math(text: str) -> list[str]:
    """Pieces of `text`, outside its $...$ math, that spell math in ASCII (mu(X), ||x||, <=)."""
    return [m.group(0) for m in _ASCII_MATH.finditer(_MATH.sub(" ", text))]


# A parameter's name in inline code, right after a word that wants a value ("T = `gamma_T`",
# "at `n_perm` pairings"), in a built page: a glue that was never filled. A name given with
# its value ("with `d_qk` = 64", "`checkpoint` set to ...", "`ws` ([1.2])") names a parameter.
_NAMED_VALUE = re.compile(
    r"(?:=|\b(?:at|is|was|of|by|to|with|from|over|every|here|gives|give|between|and|in|on))"
    r"\s*(?:\\\)\s*)?(?:</span>\s*)?"
    r'<code class="docutils literal notranslate"><span class="pre">([A-Za-z_][A-Za-z0-9_]*)</span>'
    r'(?!\s*(?:</code>\s*|<span class="pre">)(?:=|set\b|\())'
)
_CODE_BLOCK = re.compile(r'<div class="highlight.*?</div>', re.S)


def unfilled_values(html: str, names) -> list[str]:
    """The parameter names (of `names`) that a built page shows in prose where a value
    belongs, code blocks left out."""
    prose = _CODE_BLOCK.sub("", html)
    return [name for name in _NAMED_VALUE.findall(prose) if name in names]


def _output_text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    return "\n".join(
        str(data.get(mime, "")) for mime in ("text/markdown", "text/html", "text/plain")
    )


def artefacts(notebook) -> list[str]:
    """What an executed notebook would show a reader that it should not: warnings, local
    paths, reprs, long floats, timings, NaN, stderr, pandas' HTML tables, figures drawn wider
    than the page, ASCII math or emoji in verdicts and captions. One line each."""
    found = []
    for index, cell in enumerate(notebook.cells):
        where = f"cell {index}"
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown":
            found += [f"{where}: an emoji {e!r}" for e in EMOJI.findall(cell.source)]
            continue
        if "remove-cell" in tags or "remove-output" in tags:
            continue
        caption = cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("caption")
        if caption:
            found += [f"{where}: ASCII math in the caption: {a!r}" for a in ascii_math(caption)]
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream" and output.get("name") == "stderr":
                found.append(f"{where}: stderr output {output.get('text', '')[:80]!r}")
            if kind == "error":
                found.append(f"{where}: an error output")
            text = _output_text(output)
            for what, pattern in ARTEFACTS.items():
                match = pattern.search(text)
                if match:
                    found.append(f"{where}: {what}: {match.group(0)!r}")
            found += [f"{where}: an emoji {e!r}" for e in EMOJI.findall(text)]
            data = output.get("data", {})
            if 'class="dataframe"' in data.get("text/html", ""):
                found.append(f"{where}: a pandas HTML table (use collapse.tables.show)")
            if kind == "execute_result" and set(data) == {"text/plain"}:
                found.append(f"{where}: a bare repr {data['text/plain'][:60]!r}")
            if "image/png" in data:
                width = output.get("metadata", {}).get("image/png", {}).get("width")
                if width is None:
                    found.append(f"{where}: a figure without its display width (use_style)")
                elif width > 700:
                    found.append(f"{where}: a figure {width} px wide, wider than the page")
            record = output.get("metadata", {}).get(METADATA_KEY)
            if record:
                for field in ("claim", "measured", "expected"):
                    found += [
                        f"{where}: ASCII math in {record['key']}.{field}: {a!r}"
                        for a in ascii_math(record[field])
                    ]
    return found


def prepare_all(
    executed_dir, records: list[dict], expectations: dict, install: str | None = None
) -> None:
    """`prepare` every executed notebook in `executed_dir` and write its figures' data, each
    notebook rewritten atomically."""
    import nbformat

    for path in sorted(executed_dir.glob("[0-9][0-9]-*.ipynb")):
        notebook = nbformat.read(str(path), as_version=4)
        mine = [r for r in records if r["notebook"] == path.stem]
        prepare(notebook, mine, expectations, path.stem, install)
        figdata.write(notebook, executed_dir, path.stem)
        with atomic_path(path) as partial:
            nbformat.write(notebook, str(partial))
