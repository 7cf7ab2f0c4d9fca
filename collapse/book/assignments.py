"""Students: the student edition of the book, assignment notebooks, and grading.

A graded exercise in a notebook is an `{exercise}`, then its solution between the
sphinx-exercise gates `{solution-start} LABEL` and `{solution-end}` (prose and code cells
tagged `solution`), then code cells tagged `check` whose asserts grade it. The full book
shows everything; `strip_solutions` removes every solution, prose and code, so that

- the student edition (`collapse book --student`) is built from stripped copies of the
  executed notebooks and sources, with sphinx-exercise's `hide_solutions: true` on top
  (that option alone drops `{solution}` blocks but not gated ones: with gates it leaves
  the solution's code cells in the page and fails on the leftover end marker);
- an assignment (`collapse assignments`) is the source notebook with each solution code
  cell replaced by a stub, the check cells kept, and the `fast` profile's parameters;
- hidden checks (code cells tagged `hidden-check`) stay in the source and the full book, and
  leave both the assignment and the student edition; `collapse grade` (collapse.book.grading)
  puts them back when it grades.

A check cell's first line names it and may give its points: `# Check (2 points): ...`
(`# Check: ...` is worth 1 point). Why not otter-grader or nbgrader: book/teaching.md.
"""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import yaml

from ..atomic import atomic_path
from ..checks import ParameterError
from . import runner

__all__ = ["SOLUTION_TAG", "CHECK_TAG", "HIDDEN_TAG", "PROFILE", "strip_solutions",
           "check_spec", "check_cells", "make_assignment", "write_assignments",
           "stage_student_edition"]  # fmt: skip

SOLUTION_TAG, CHECK_TAG, HIDDEN_TAG = "solution", "check", "hidden-check"
# Assignments carry and are graded with these parameters: quick to run by hand and to grade.
PROFILE = "fast"
_DIRECTIVE = re.compile(
    r"^(?P<fence>:{3,}|`{3,})\{(?P<kind>solution|solution-start|solution-end)\}\s*(?P<arg>\S*)"
)
_CHECK = re.compile(r"^#\s*Check\s*(?:\((?P<points>\d+)\s+points?\))?\s*:\s*(?P<name>.*\S)")


def _tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def _stub(label: str) -> str:
    """What replaces a solution cell: it raises, so an unanswered exercise fails its checks with
    a clear line.
    """
    prompt = f"# YOUR ANSWER HERE for exercise {label}: replace these two lines with your code."
    return f'{prompt}\nraise RuntimeError("exercise {label} is not answered yet")'


class _Scanner:
    """Walks markdown lines in order across cells, dropping `{solution}` blocks and everything
    inside a gate.
    """

    def __init__(self, where: str):
        self.where, self.closing, self.gate = where, None, None

    def markdown(self, text: str) -> str:
        kept = []
        for line in text.splitlines():
            stripped = line.strip()
            if self.closing is not None:  # inside a solution directive's own fence
                self.closing = None if stripped == self.closing else self.closing
                continue
            match = _DIRECTIVE.match(stripped)
            if match is None:
                if self.gate is None:
                    kept.append(line)
                continue
            kind, self.closing = match["kind"], match["fence"]
            if (kind == "solution-end") != (
                self.gate is not None
            ):  # only an end may appear inside a gate, and only there
                raise ParameterError(
                    f"{self.where}: unbalanced solution gates at `{stripped}` "
                    "(every {solution-start} needs one {solution-end})"
                )
            if kind != "solution":
                self.gate = (match["arg"] or "?") if kind == "solution-start" else None
        if self.closing is not None:  # a directive cannot span cells
            raise ParameterError(
                f"{self.where}: a solution directive is never closed "
                f"(no `{self.closing}` line in its cell)"
            )
        return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip("\n")

    def finish(self) -> None:
        if self.gate is not None:
            raise ParameterError(
                f"{self.where}: the {{solution-start}} gate of {self.gate} "
                "is never closed by a {solution-end}"
            )


def strip_solutions(nb, *, stub: bool, where: str = "notebook"):
    """A copy of `nb` with every solution removed; solution code cells become stubs when
    `stub`, else go.

    Hidden checks go too. A code cell tagged `solution` must sit inside a gate and every code
    cell inside a gate must be tagged `solution`: otherwise solution code could leak to
    students, or a gate could swallow a cell the notebook needs.
    """
    out, cells, scan = copy.deepcopy(nb), [], _Scanner(where)
    for cell in out.cells:
        if cell.cell_type == "code" and HIDDEN_TAG in _tags(cell):
            continue
        if cell.cell_type != "code":
            cell.source = scan.markdown(cell.source)
            if cell.source.strip():
                cells.append(cell)
            continue
        tagged = SOLUTION_TAG in _tags(cell)
        if tagged != (scan.gate is not None):
            first = (cell.source.strip().splitlines() or [""])[0]
            place = (
                "outside a {solution-start} gate"
                if tagged
                else "inside a {solution-start} gate without the tag 'solution'"
            )
            raise ParameterError(f"{where}: code cell `{first}` is {place}")
        if not tagged:
            cells.append(cell)
        elif stub:
            cell.source, cell.outputs, cell.execution_count = _stub(scan.gate), [], None
            cells.append(cell)
    scan.finish()
    out.cells = cells
    papermill = out.metadata.get("papermill", {})
    if not isinstance(papermill.get("input_path", ""), str):  # the whole source notebook
        papermill["input_path"] = where
    return out


def check_spec(cell, number: int) -> tuple[str, int]:
    """A check's name and points from its first line, `# Check (2 points): name` (1 point when
    none is given); another comment is the name itself, and no comment names it `check N`."""
    first = (cell.source.strip().splitlines() or [""])[0]
    match = _CHECK.match(first)
    if match:
        return match["name"], int(match["points"] or 1)
    return (first.lstrip("#").strip() if first.startswith("#") else f"check {number}"), 1


def check_cells(nb, where: str = "notebook", tags=(CHECK_TAG,)) -> dict:
    """{name: cell} of the code cells with one of `tags` (default: the visible checks), in order;
    names must be unique among them."""
    cells = [c for c in nb.cells if c.cell_type == "code" and set(tags) & set(_tags(c))]
    named = {check_spec(c, i)[0]: c for i, c in enumerate(cells, 1)}
    if len(named) != len(cells):
        raise ParameterError(
            f"{where}: two check cells share a name "
            "(the first comment line of a check cell names it)"
        )
    return named


def make_assignment(project: runner.Project, notebook: runner.Notebook):
    """The assignment notebook: stubs for solutions, checks kept, `fast` parameters, no outputs."""
    nb = notebook.source()
    params = project.resolve(notebook, PROFILE, {})
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in _tags(cell):
            cell.source = "\n".join(f"{name} = {value!r}" for name, value in params.items())
    nb = strip_solutions(nb, stub=True, where=notebook.path.name)
    if not check_cells(nb, notebook.path.name):
        raise ParameterError(
            f"{notebook.path.name}: no cell tagged 'check', so there is nothing to grade"
        )
    nb.metadata.pop("jupytext", None)
    nb.metadata.setdefault("collapse", {})["assignment"] = {
        "notebook": notebook.name,
        "profile": PROFILE,
    }
    return nb


def write_assignments(project: runner.Project, names, out: Path) -> list[Path]:
    """One assignment .ipynb per selected notebook in `out`; every notebook is checked before
    any is written.
    """
    import nbformat

    made = [(nb.name, make_assignment(project, nb)) for nb in project.select(names)]
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, nb in made:
        with atomic_path(out / f"{name}.ipynb") as partial:
            nbformat.write(nb, str(partial))
        paths.append(out / f"{name}.ipynb")
    return paths


def stage_student_edition(project: runner.Project, stage: Path) -> None:
    """A copy of the book's sources in `stage` with every solution stripped, and a config that
    hides solutions.

    Everything a reader can reach (pages, the executed notebooks offered for download, the
    MyST sources) is a stripped copy; `hide_solutions: true` also covers the prose pages.
    """
    import jupytext
    import nbformat

    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    shutil.copy(project.root / "_toc.yml", stage / "_toc.yml")
    shutil.copytree(project.root / "book", stage / "book")
    shutil.copytree(project.notebooks_dir, stage / "notebooks")
    for path in sorted((stage / "book" / "executed").glob("*.ipynb")):
        nbformat.write(
            strip_solutions(nbformat.read(str(path), as_version=4), stub=False, where=path.name),
            str(path),
        )
    for path in sorted((stage / "notebooks").glob("[0-9][0-9]-*.md")):
        jupytext.write(
            strip_solutions(jupytext.read(path), stub=True, where=path.name), path, fmt="md:myst"
        )
    config = yaml.safe_load((project.root / "_config.yml").read_text()) or {}
    config["title"] = f"{config.get('title', 'Book')} (student edition)"
    config.setdefault("sphinx", {}).setdefault("config", {})["hide_solutions"] = True
    (stage / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
