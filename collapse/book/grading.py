"""Grading a class: every submission in a sandbox of its own, scored in points, into a gradebook.

A submission is an assignment notebook (`collapse assignments`) with the student's answers. It
is executed with papermill and the `fast` parameters, with the check cells taken from the
chapter's source (a deleted or edited check is put back, and the row says so) and the hidden
checks (cells tagged `hidden-check`, never in an assignment) put back after the checks they
follow. Each check is worth the points its first line declares (`# Check (2 points): ...`).

Each submission runs in its own temporary folder and its own kernel, which papermill reaches
over Unix sockets (ZMQ's ipc transport), so the kernel needs no network at all. Where the
machine allows (`unshare -n -m`), the kernel runs without a network and with the project and
papermill's output mounted read-only, so that student code can neither download nor change the
grader's files, checks or results; always with a memory limit (`ulimit -v`) and a time limit per
cell. `grade_class` grades files and folders in parallel processes; `write_gradebook` writes one
CSV row per submission, atomically. A submission that cannot be graded (not a notebook, an
unknown assignment, a symbolic link, which is never followed) is a row with the reason, never a
crash of the run; a spreadsheet opening the gradebook runs none of its cells as a formula.
"""

from __future__ import annotations

import copy
import csv
import errno
import io
import logging
import multiprocessing
import os
import re
import stat
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import write_atomic
from ..checks import ParameterError, check_int
from . import runner
from .assignments import CHECK_TAG, HIDDEN_TAG, PROFILE, check_cells, check_spec
from .sandbox import Sandbox, sandbox

__all__ = [
    "CheckResult",
    "Grade",
    "read_submission",
    "grade",
    "collect",
    "grade_class",
    "gradebook",
    "gradebook_path",
    "write_gradebook",
]

# Reply for a cell interrupted at its time limit: without one, nbclient waits for the kernel's own
# reply, forever when the loop is in C code that ignores the interrupt.
_TIMEOUT = {"ename": "TimeoutError", "evalue": "cell time limit reached", "traceback": []}
_ARROW = re.compile(r"^-+>\s*\d+\s+(?P<line>.*\S)")
_ERROR_WIDTH = 200  # characters of a gradebook row's error column
# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Opens a submission without following a symbolic link, and a FIFO without waiting for a writer.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_SYMLINK = "a symbolic link: refused, never read (submit the notebook itself)"


@dataclass
class CheckResult:
    name: str
    points: int
    hidden: bool
    passed: bool
    detail: str = ""


@dataclass
class Grade:
    """One graded submission: its checks, lines about other cells that failed, notes about
    restored checks, and `error` when it could not be graded at all."""

    file: str
    notebook: str = ""
    checks: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    error: str = ""

    @property
    def score(self) -> int:
        return sum(c.points for c in self.checks if c.passed)

    @property
    def max_score(self) -> int:
        return sum(c.points for c in self.checks)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and not self.error and all(c.passed for c in self.checks)

    def summary(self, remark: bool = True) -> str:
        """One line for the terminal (with the gradebook's error column when `remark`)."""
        if self.error:
            return f"{self.file}: not graded: {self.error}"
        ok = sum(c.passed for c in self.checks)
        line = (
            f"{self.file}: {self.notebook}, {self.score}/{self.max_score} points "
            f"({ok}/{len(self.checks)} checks passed)"
        )
        return line + (f"; {self.remark()}" if remark and self.remark() else "")

    def remark(self) -> str:
        """The gradebook's error column: why it was not graded, or restored checks and the
        cells that raised or were stopped."""
        text = " ".join((self.error or "; ".join([*self.notes, *self.problems])).split())
        return text if len(text) <= _ERROR_WIDTH else text[: _ERROR_WIDTH - 1] + "…"

    def table(self) -> str:
        names = [c.name + (" (hidden)" if c.hidden else "") for c in self.checks]
        width = min(64, max([len("check")] + [len(n) for n in names]))
        lines = [f"{'#':>3}  {'check':<{width}}  {'points':>6}  result  detail"]
        for i, (c, name) in enumerate(zip(self.checks, names, strict=True), 1):
            name = name[:width]
            earned = f"{c.points if c.passed else 0}/{c.points}"
            lines.append(
                f"{i:>3}  {name:<{width}}  {earned:>6}  {'pass' if c.passed else 'FAIL':<6}  "
                f"{c.detail}".rstrip()
            )
        ok = sum(c.passed for c in self.checks)
        lines.append(
            f"score: {self.score}/{self.max_score} points ({ok}/{len(self.checks)} checks passed)"
        )
        return "\n".join(lines)


def _read_regular(path: Path) -> bytes:
    """The bytes of `path`, a regular file, or ParameterError saying what else it is.

    Why not `open`: a symbolic link in a class folder would have the grader read (and quote, in
    the gradebook's error column) any file it may read; the link is refused, and O_NOFOLLOW
    refuses one swapped in after that check."""
    if path.is_symlink():
        raise ParameterError(_SYMLINK)
    try:
        handle = os.open(path, _OPEN_FLAGS)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW met a link
            raise ParameterError(_SYMLINK) from None
        raise ParameterError(f"cannot be read: {err.strerror}") from None
    try:
        mode = os.fstat(handle).st_mode
        if stat.S_ISDIR(mode):
            raise ParameterError(
                "a folder: not searched (give it as a PATH of its own to grade what it holds)"
            )
        if not stat.S_ISREG(mode):
            raise ParameterError("not a regular file (a pipe, socket or device): never read")
        with os.fdopen(handle, "rb", closefd=False) as stream:
            return stream.read()
    finally:
        os.close(handle)


def read_submission(path: Path):
    """The submitted notebook, or ParameterError with one line naming what is wrong with it."""
    import nbformat

    data = _read_regular(Path(path))
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as err:  # nbformat raises JSON, validation and reader errors alike
        first = (str(err).splitlines() or [type(err).__name__])[0][:120]
        raise ParameterError(f"not a Jupyter notebook (.ipynb): {first}") from None
    made = nb.metadata.get("collapse")
    made = made.get("assignment") if isinstance(made, dict) else None
    if not isinstance(made, dict) or not made.get("notebook"):
        raise ParameterError(
            "not made by `collapse assignments` (it lacks the collapse.assignment metadata)"
        )
    if not isinstance(made["notebook"], str):
        raise ParameterError(
            f"collapse.assignment.notebook must be a chapter's name, got {made['notebook']!r}"
        )
    return nb


def _tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def _with_source_checks(submission, source, where: str):
    """The submission with the source's checks: each check cell restored by name (a deleted one
    appended, both noted), a check the student wrote left unscored, and every hidden check
    inserted after the check it follows in the source. -> (notebook, notes)."""
    nb, notes = copy.deepcopy(submission), []
    graded = check_cells(source, where, tags=(CHECK_TAG, HIDDEN_TAG))
    visible = {n: c for n, c in graded.items() if HIDDEN_TAG not in _tags(c)}
    after, last = {}, None  # hidden checks, by the name of the visible check before them
    for name, cell in graded.items():
        if HIDDEN_TAG in _tags(cell):
            after.setdefault(last, []).append(cell)
        else:
            last = name
    cells, seen = [], set()
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type != "code" or CHECK_TAG not in _tags(cell):
            continue
        name = check_spec(cell, sum(CHECK_TAG in _tags(c) for c in cells))[0]
        if name not in visible or name in seen:  # a check the student wrote: runs, not scored
            cell.metadata["tags"] = [t for t in _tags(cell) if t != CHECK_TAG]
            continue
        seen.add(name)
        if cell.source.strip() != visible[name].source.strip():
            notes.append(f"check '{name}' was edited and is restored")
        cell.source = visible[name].source
        cells.extend(copy.deepcopy(c) for c in after.pop(name, []))
    for name, cell in visible.items():
        if name not in seen:
            notes.append(f"check '{name}' was deleted and is restored")
            cells.append(copy.deepcopy(cell))
            cells.extend(copy.deepcopy(c) for c in after.pop(name, []))
    cells.extend(copy.deepcopy(c) for rest in after.values() for c in rest)
    nb.cells = cells
    return nb, notes


@contextmanager
def _quiet(name: str):
    """Silence a logger (papermill logs a timeout as an error; the grade reports it)."""
    logger = logging.getLogger(name)
    level, logger.level = logger.level, logging.CRITICAL
    try:
        yield
    finally:
        logger.setLevel(level)


def _execute(nb, params: dict, timeout: int, box: Sandbox):
    """Run every cell with papermill, past errors, in a fresh folder and sandboxed kernel; a cell
    over `timeout` s is interrupted. -> (executed notebook, why execution stopped or None)."""
    import nbformat
    import papermill
    from nbclient.exceptions import CellTimeoutError

    os.environ.setdefault("JUPYTER_PREFER_ENV_PATH", "1")
    stopped = None
    with tempfile.TemporaryDirectory(prefix="collapse-grade-") as tmp, _quiet("papermill"):
        work, out = Path(tmp) / "work", Path(tmp) / "out"
        work.mkdir()
        out.mkdir()
        executed = None
        with box.submission(work, out) as confined:
            try:
                executed = papermill.execute_notebook(
                    nb, str(out / "graded.ipynb"), parameters=params, kernel_name="python3",
                    progress_bar=False, cwd=str(work), execution_timeout=timeout,
                    allow_errors=True, interrupt_on_timeout=True, error_on_timeout=_TIMEOUT,
                    kernel_manager_class=confined.kernel_manager_class)  # fmt: skip
            except papermill.PapermillExecutionError:
                pass  # some cell raised: every cell ran, and the errors are scored cell by cell
            except CellTimeoutError:
                stopped = f"a cell ran past {timeout} s and did not respond to the interrupt"
            except Exception as err:  # the kernel died or would not start
                first = (str(err).strip().splitlines() or [""])[0][:160]
                stopped = f"{type(err).__name__}: {first}".rstrip(": ")
            if executed is None:
                path = out / "graded.ipynb"
                executed = nbformat.read(str(path), as_version=4) if path.is_file() else nb
            stopped = stopped or confined.stopped
    return executed, stopped


def _first_line(cell) -> str:
    line = (cell.source.strip().splitlines() or [""])[0]
    return line if len(line) <= 60 else line[:59] + "…"


def error_line(output) -> str:
    """`Type: message`, or for a bare failed assert the assert line itself."""
    text = f"{output.ename}: {output.evalue}" if output.evalue else output.ename
    if not output.evalue:
        arrows = [
            m["line"]
            for line in runner.ANSI.sub("", "\n".join(output.get("traceback", []))).splitlines()
            if (m := _ARROW.match(line))
        ]
        text += f" at `{arrows[-1]}`" if arrows else ""
    return text.splitlines()[0][:160] if text else "error"


def _score(result: Grade, executed, timeout: int, stopped: str | None) -> None:
    """Fill `result` from the executed cells: one CheckResult per check, a line per other cell
    that raised or was stopped."""
    cells = [
        c
        for c in executed.cells
        if c.cell_type == "code"
        and c.source.strip()
        and "papermill-error-cell-tag" not in _tags(c)
    ]
    for cell in cells:
        errors = [error_line(o) for o in cell.get("outputs", []) if o.output_type == "error"]
        hidden = HIDDEN_TAG in _tags(cell)
        if hidden or CHECK_TAG in _tags(cell):
            ran = bool(cell.execution_count)
            detail = (
                errors[0]
                if errors
                else ""
                if ran
                else "not run: execution stopped before this check finished"
            )
            name, points = check_spec(cell, len(result.checks) + 1)
            result.checks.append(CheckResult(name, points, hidden, ran and not errors, detail))
        elif errors:
            where = f"cell In[{cell.execution_count}] `{_first_line(cell)}`"
            result.problems.append(
                f"{where} was stopped after {timeout} s (the time limit per cell)"
                if errors[0].startswith("KeyboardInterrupt")
                else f"{where} raised {errors[0]}"
            )
    if stopped:
        started = [
            c for c in cells if c.get("metadata", {}).get("papermill", {}).get("start_time")
        ]
        where = f" (in cell `{_first_line(started[-1])}`)" if started else ""
        result.problems.insert(0, f"execution stopped: {stopped}{where}")


def grade(
    project: runner.Project, path: Path, *, timeout: int = 60, memory_mb: int = 4096
) -> Grade:
    """Execute one submission in its sandbox with the `fast` parameters and score every check.

    Never raises for the submission's own faults: they come back as `Grade.error`."""
    timeout = check_int("--timeout", timeout, minimum=1)
    box = sandbox(project.root, memory_mb)
    result = Grade(Path(path).name)
    try:
        submission = read_submission(Path(path))
    except ParameterError as err:
        result.error = str(err)
        return result
    result.notebook = submission.metadata["collapse"]["assignment"]["notebook"]
    try:
        notebook = project.select([result.notebook])[0]
    except ParameterError:
        result.error = f"answers an unknown assignment {result.notebook!r}"
        return result
    params, source = project.resolve(notebook, PROFILE, {}), notebook.source()
    nb, result.notes = _with_source_checks(submission, source, notebook.path.name)
    executed, stopped = _execute(nb, params, timeout, box)
    _score(result, executed, timeout, stopped)
    order = list(check_cells(source, notebook.path.name, tags=(CHECK_TAG, HIDDEN_TAG)))
    result.checks.sort(key=lambda c: order.index(c.name))  # the source's order, every row alike
    return result


def collect(paths) -> list[Path]:
    """The submissions named by files and folders, each once, however often it is named.

    A folder stands for every entry in it, hidden ones too, each a row: `..ipynb` or
    `.alice.ipynb` may be a student's work, and a row saying what a file is (a checkpoint, a
    symbolic link, a subfolder) costs less than a submission silently missing from the
    gradebook. One file named twice (the same inode: a folder and a file in it, two spellings
    of a path, a hard link) is graded once."""
    files, seen = [], set()
    for raw in paths:
        path = Path(raw)
        if not os.path.lexists(path):
            raise ParameterError(f"PATH {path}: no such file or folder")
        for entry in sorted(path.iterdir()) if path.is_dir() else [path]:
            info = entry.lstat()
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                files.append(entry)
    if not files:
        raise ParameterError("PATH: no submissions found (give notebooks or folders of them)")
    return files


def _grade_file(root: str, path: str, timeout: int, memory_mb: int) -> Grade:
    """One submission in a worker process; a failure of the grader itself becomes a row."""
    try:
        return grade(runner.Project.find(Path(root)), Path(path), timeout=timeout,
                     memory_mb=memory_mb)  # fmt: skip
    except Exception as err:  # noqa: BLE001 (a class is never lost to one submission)
        return Grade(Path(path).name, error=f"grader error: {type(err).__name__}: {err}")


def grade_class(project, files, *, timeout=60, memory_mb=4096, jobs=1, report=print) -> list:
    """Grade every file, `jobs` at a time in separate processes; `report(grade)` as each one
    finishes. -> the grades in the order of `files`."""
    jobs = check_int("--jobs", jobs, minimum=1)
    check_int("--timeout", timeout, minimum=1)
    sandbox(project.root, memory_mb)  # check --memory, probe before any worker starts
    args = [(str(project.root), str(f), timeout, memory_mb) for f in files]
    grades = [None] * len(files)
    if jobs == 1:
        for i, a in enumerate(args):
            grades[i] = _grade_file(*a)
            report(grades[i])
        return grades
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {pool.submit(_grade_file, *a): i for i, a in enumerate(args)}
        for future in as_completed(futures):
            grades[futures[future]] = future.result()
            report(grades[futures[future]])
    return grades


def gradebook(grades, files) -> str:
    """The CSV text: one row per submission (file, assignment, each check's points, total,
    max, error), one column per check of every assignment graded, headed `name (N pt)`."""
    columns = {}  # (assignment, check) -> header, in the order first met
    many = len({g.notebook for g in grades if g.checks}) > 1
    for g in grades:
        for c in g.checks:
            label = f"{g.notebook[:2]}: " if many else ""
            hidden = ", hidden" if c.hidden else ""
            columns.setdefault((g.notebook, c.name), f"{label}{c.name} ({c.points} pt{hidden})")
    out = io.StringIO()
    writer = csv.writer(out)  # lines end in CRLF (RFC 4180): a CR in a cell is then quoted too
    header = ["file", "assignment", *columns.values(), "total", "max", "error"]
    writer.writerow(map(_inert, header))
    for g, path in zip(grades, files, strict=True):
        earned = {(g.notebook, c.name): c.points if c.passed else 0 for c in g.checks}
        cells = [earned.get(key, "") for key in columns]
        total = "" if g.error else g.score
        maximum = "" if g.error else g.max_score
        row = [str(path), g.notebook, *cells, total, maximum, g.remark()]
        writer.writerow(map(_inert, row))
    return out.getvalue()


def _inert(cell):
    """A gradebook cell a spreadsheet shows rather than runs: text that starts like a formula
    (a student's file name or notebook metadata, `=HYPERLINK(...)`) gets a leading quote, as
    OWASP advises against CSV injection; numbers stay numbers."""
    return "'" + cell if isinstance(cell, str) and cell.startswith(_FORMULA_START) else cell


def gradebook_path(name) -> Path:
    """`--csv NAME` checked before anything is graded: a file name (not a folder, a device or a
    pipe) in an existing folder where this process can create a file.

    Why a trial file: a class takes minutes to grade, and a gradebook that cannot be written
    (a read-only folder, /proc) would otherwise be found out only after all of them."""
    if not str(name).strip():  # Path("") would be the current folder
        raise ParameterError("--csv needs a file name, got ''")
    path = Path(name)
    if path.is_dir():
        raise ParameterError(f"--csv {name}: a folder; give a file name ({path / 'grades.csv'})")
    if not path.parent.is_dir():
        raise ParameterError(f"--csv {name}: the folder {path.parent} does not exist")
    if path.exists() and not path.is_file():
        raise ParameterError(f"--csv {name}: not a regular file (a device or a pipe)")
    try:
        handle, trial = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".partial"
        )
    except OSError as err:
        raise ParameterError(
            f"--csv {name}: cannot create a file in {path.parent} ({err.strerror})"
        ) from None
    os.close(handle)
    os.unlink(trial)
    return path


def write_gradebook(text: str, path: Path) -> None:
    """Write the CSV atomically: a temporary file beside it, then a rename."""
    write_atomic(gradebook_path(path), text)
