"""Each figure's data as a CSV file, offered for download under the figure on its page.

A chapter's outputs already carry every figure's points (collapse.figure_data puts them in the
output when the figure is drawn), so `write` needs no execution: it saves them as files in
book/executed/data/<chapter>/ and puts a line under each figure linking them. The data stay in
the notebook too, so the downloadable .ipynb carries them; the book ignores a mimetype it
cannot show.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..atomic import write_atomic
from ..figure_data import MIME

__all__ = ["TAG", "write", "link_markdown"]

TAG = "figure-data"
# Cells whose figures are not on the page.
_OFF_PAGE = ("remove-cell", "remove-output")


def _tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def _names(cell, count: int, first: int) -> list[str]:
    """File names (no suffix) for a cell's `count` figures, the first the chapter's `first`-th:
    the cell's figure name (its target on the page) when it has one, else figure-<n>."""
    name = cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name")
    if not name:
        return [f"figure-{first + k}" for k in range(count)]
    name = re.sub(r"[^\w.-]+", "-", name)
    return [name if k == 0 else f"{name}-{k + 1}" for k in range(count)]


def link_markdown(stem: str, names: list[str]) -> str:
    """The line under a figure; Sphinx's {download} role copies each file into the site (the
    paths are relative to book/executed/, where the page is)."""
    links = ", ".join(f"{{download}}`{n}.csv <data/{stem}/{n}.csv>`" for n in names)
    these = "this figure" if len(names) == 1 else "these figures"
    return f"Data of {these}: {links} (CSV, one row per point)."


def _write_atomic(path: Path, text: str) -> None:
    """Write `text` unless the file already holds it; a reader never sees half a file."""
    data = text.encode()
    if path.is_file() and path.read_bytes() == data:
        return
    write_atomic(path, data)


def write(notebook, executed_dir: Path, stem: str) -> list[Path]:
    """Write the figures' data of the executed notebook `stem` to executed_dir/data/<stem>/ and
    put a download line (a markdown cell tagged TAG) after each cell with figure data, in place.

    Idempotent: the tagged cells are dropped and written again, CSVs no figure wrote any more
    are removed. Returns the CSV paths, in the chapter's order.
    """
    import nbformat

    folder = executed_dir / "data" / stem
    written, cells = [], []
    for cell in (c for c in notebook.cells if TAG not in _tags(c)):
        cells.append(cell)
        if any(t in _tags(cell) for t in _OFF_PAGE):
            continue
        texts = [o["data"][MIME] for o in cell.get("outputs", []) if MIME in o.get("data", {})]
        if not texts:
            continue
        names = _names(cell, len(texts), len(written) + 1)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in zip(names, texts, strict=True):
            path = folder / f"{name}.csv"
            _write_atomic(path, "".join(text) if isinstance(text, list) else text)
            written.append(path)
        cells.append(
            nbformat.v4.new_markdown_cell(
                link_markdown(stem, names),
                id=f"{TAG}-{len(written)}",
                metadata={"tags": [TAG]},
            )
        )
    notebook.cells = cells
    if folder.is_dir():
        for stale in set(folder.glob("*.csv")) - set(written):
            stale.unlink()
        if not any(folder.iterdir()):
            folder.rmdir()
    return written
