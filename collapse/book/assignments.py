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
- `collapse grade` runs a submission with papermill, continuing past errors, with the
  check cells restored from the source notebook (as nbgrader restores its test cells, so
  that deleting an assert does not pass it), and scores each check.

Why not otter-grader or nbgrader: book/teaching.md gives the numbers.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..checks import ParameterError
from . import runner

__all__ = ["SOLUTION_TAG", "CHECK_TAG", "PROFILE", "strip_solutions", "check_cells",
           "make_assignment", "write_assignments", "stage_student_edition", "grade",
           "Grade"]  # fmt: skip

SOLUTION_TAG, CHECK_TAG = "solution", "check"
# Assignments carry and are graded with these parameters: quick to run by hand and to grade.
PROFILE = "fast"
_DIRECTIVE = re.compile(
    r"^(?P<fence>:{3,}|`{3,})\{(?P<kind>solution|solution-start|solution-end)\}\s*(?P<arg>\S*)"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Reply for a cell interrupted at its time limit: without one, nbclient waits for the kernel's own
# reply, forever when the loop is in C code that ignores the interrupt.
_TIMEOUT = {"ename": "TimeoutError", "evalue": "cell time limit reached", "traceback": []}
_ARROW = re.compile(r"^-+>\s*\d+\s+(?P<line>.*\S)")


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

    A code cell tagged `solution` must sit inside a gate and every code cell inside a gate
    must be tagged `solution`: otherwise solution code could leak to students, or a gate
    could swallow a cell the notebook needs.
    """
    out, cells, scan = copy.deepcopy(nb), [], _Scanner(where)
    for cell in out.cells:
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
    return out


def check_name(cell, number: int) -> str:
    """A check's name: its first line when that is a comment (`# Check: ...`), else `check N`."""
    first = (cell.source.strip().splitlines() or [""])[0]
    return (
        first.lstrip("#").strip().removeprefix("Check:").strip()
        if first.startswith("#")
        else f"check {number}"
    )


def check_cells(nb, where: str = "notebook") -> dict:
    """{name: cell} of the cells tagged `check`, in order; names must be unique."""
    cells = [c for c in nb.cells if c.cell_type == "code" and CHECK_TAG in _tags(c)]
    named = {check_name(c, i): c for i, c in enumerate(cells, 1)}
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


def _write_atomic(nb, path: Path) -> None:
    import nbformat

    partial = path.with_name(f".{path.name}.partial")
    nbformat.write(nb, str(partial))
    partial.replace(path)


def write_assignments(project: runner.Project, names, out: Path) -> list[Path]:
    """One assignment .ipynb per selected notebook in `out`; every notebook is checked before
    any is written.
    """
    made = [(nb.name, make_assignment(project, nb)) for nb in project.select(names)]
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, nb in made:
        _write_atomic(nb, out / f"{name}.ipynb")
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


@dataclass
class Grade:
    """A graded submission: each check's (name, passed, detail) and lines about what
    went wrong elsewhere.
    """

    notebook: str
    checks: list = field(default_factory=list)
    problems: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok, _ in self.checks)

    def table(self) -> str:
        width = min(72, max([len("check")] + [len(name) for name, _, _ in self.checks]))
        lines = [f"{'#':>3}  {'check':<{width}}  result  detail"]
        for i, (name, ok, detail) in enumerate(self.checks, 1):
            lines.append(
                (
                    f"{i:>3}  {name[:width]:<{width}}  {'pass' if ok else 'FAIL':<6}  {detail}"
                ).rstrip()
            )
        score = sum(ok for _, ok, _ in self.checks)
        return "\n".join([*lines, f"score: {score}/{len(self.checks)} checks passed"])


def read_submission(path: Path):
    """The submitted notebook, or a one-line error naming what is wrong with the file."""
    import nbformat

    if not path.is_file():
        raise ParameterError(f"submission {path}: no such file")
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as err:  # nbformat raises JSON, validation and reader errors alike
        raise ParameterError(
            f"submission {path} is not a Jupyter notebook (.ipynb): "
            f"{str(err).splitlines()[0][:120]}"
        ) from None
    if not (nb.metadata.get("collapse", {}).get("assignment") or {}).get("notebook"):
        raise ParameterError(
            f"submission {path} was not made by `collapse assignments` "
            "(it lacks the collapse.assignment metadata)"
        )
    return nb


def _with_original_checks(submission, source, where: str):
    """The submission with each check cell's code taken from the source notebook; checks it lost go
    at the end.
    """
    nb, original = copy.deepcopy(submission), check_cells(source, where)
    for number, cell in enumerate(
        (c for c in nb.cells if c.cell_type == "code" and CHECK_TAG in _tags(c)), 1
    ):
        name = check_name(
            cell, number
        )  # numbered as in check_cells, so unnamed checks match by position
        if name in original:
            cell.source = original.pop(name).source
        else:  # a check the student renamed or wrote: it runs, but is not scored
            cell.metadata["tags"] = [t for t in _tags(cell) if t != CHECK_TAG]
    nb.cells.extend(copy.deepcopy(list(original.values())))
    return nb


def _error_line(output) -> str:
    """`Type: message`, or for a bare failed assert the assert line itself."""
    text = f"{output.ename}: {output.evalue}" if output.evalue else output.ename
    if not output.evalue:
        arrows = [
            m["line"]
            for line in _ANSI.sub("", "\n".join(output.get("traceback", []))).splitlines()
            if (m := _ARROW.match(line))
        ]
        text += f" at `{arrows[-1]}`" if arrows else ""
    return text.splitlines()[0][:160] if text else "error"


@contextmanager
def _quiet(name: str):
    """Silence a logger (papermill logs a timeout as an error; the score table reports it)."""
    logger = logging.getLogger(name)
    level, logger.level = logger.level, logging.CRITICAL
    try:
        yield
    finally:
        logger.setLevel(level)


def _execute(nb, params: dict, cwd: Path, timeout: int):
    """Run every cell with papermill, past errors; a cell over `timeout` s is interrupted.
    -> (executed nb, stop line).
    """
    import nbformat
    import papermill
    from nbclient.exceptions import CellTimeoutError

    os.environ.setdefault("JUPYTER_PREFER_ENV_PATH", "1")
    stopped = None
    with tempfile.TemporaryDirectory() as tmp, _quiet("papermill"):
        out = Path(tmp) / "graded.ipynb"
        try:
            papermill.execute_notebook(
                nb, str(out), parameters=params, kernel_name="python3", progress_bar=False,
                cwd=str(cwd), execution_timeout=timeout, allow_errors=True,
                interrupt_on_timeout=True, error_on_timeout=_TIMEOUT,
                kernel_manager_class=runner._quiet_kernel_manager())  # fmt: skip
        except papermill.PapermillExecutionError:
            pass  # some cell raised: every cell still ran, and the errors are scored cell by cell
        except CellTimeoutError:
            stopped = (
                f"execution stopped: a cell ran past {timeout} s "
                "and did not respond to the interrupt"
            )
        except Exception as err:  # the kernel died or would not start
            stopped = (
                f"execution stopped: {type(err).__name__}: "
                f"{(str(err).strip().splitlines() or [''])[0][:160]}"
            ).rstrip(": ")
        executed = nbformat.read(str(out), as_version=4) if out.is_file() else nb
    return executed, stopped


def grade(project: runner.Project, path: Path, timeout: int = 60) -> Grade:
    """Execute a submission with the `fast` parameters and score every check cell."""
    if timeout < 1:
        raise ParameterError(f"--timeout must be at least 1 second, got {timeout}")
    submission = read_submission(path)
    notebook = project.select([submission.metadata["collapse"]["assignment"]["notebook"]])[0]
    params = project.resolve(notebook, PROFILE, {})
    nb = _with_original_checks(submission, notebook.source(), notebook.path.name)
    executed, stopped = _execute(nb, params, project.notebooks_dir, timeout)
    result = Grade(notebook.name)
    cells = [
        c
        for c in executed.cells
        if c.cell_type == "code"
        and c.source.strip()
        and "papermill-error-cell-tag" not in _tags(c)
    ]
    for cell in cells:
        errors = [_error_line(o) for o in cell.get("outputs", []) if o.output_type == "error"]
        if CHECK_TAG in _tags(cell):
            detail = (
                errors[0]
                if errors
                else (
                    ""
                    if cell.execution_count
                    else "not run: execution stopped before this check finished"
                )
            )
            result.checks.append(
                (
                    check_name(cell, len(result.checks) + 1),
                    bool(cell.execution_count) and not errors,
                    detail,
                )
            )
        elif errors:
            where = f"cell In[{cell.execution_count}] `{_first_line(cell)}`"
            timed_out = errors[0].startswith("KeyboardInterrupt")
            result.problems.append(
                f"{where} was stopped after {timeout} s (the time limit per cell)"
                if timed_out
                else f"{where} raised {errors[0]}"
            )
    if stopped:
        started = [
            c for c in cells if c.get("metadata", {}).get("papermill", {}).get("start_time")
        ]  # papermill stamps each cell it starts
        result.problems.append(
            stopped + (f" (in cell `{_first_line(started[-1])}`)" if started else "")
        )
    return result


def _first_line(cell) -> str:
    line = (cell.source.strip().splitlines() or [""])[0]
    return line if len(line) <= 60 else line[:59] + "…"
