"""Grading a class: every submission in a sandbox of its own, scored in points, into a gradebook.

A submission is an assignment notebook (`collapse assignments`) with the student's answers. It
is executed with nbclient and the `fast` parameters, with the checks taken from the chapter's
source only (a deleted or edited check is put back, a check cell of the student's own is
ignored, and the row says so) and the hidden checks (cells tagged `hidden-check`, never in an
assignment) put back after the checks they follow. Each check is worth the points its first
line in the source declares (`# Check (2 points): ...`). A check never runs in the student's
kernel: it runs in the grader's check process on the values it reads, fetched from the kernel
as plain data (`checkhost`, `wire`), and the gradebook says why a visible check failed and only
that a hidden one did.

Each submission runs in its own temporary folder and its own kernel, confined by `sandbox`
(its own unprivileged user, no network, no view of the project or the grader, limits for the
whole submission, every process of it killed when it ends), which the grader reaches over Unix
sockets (ZMQ's ipc transport). `grade_class` grades files and folders, each in a process of its
own when in parallel; the gradebook is rewritten, atomically, as each row finishes, so the rows
graded survive the grader. A submission that cannot be graded (not a notebook, an unknown
assignment, a symbolic link, which is never followed) is a row with the reason, never a
crash of the run; a spreadsheet opening the gradebook runs none of its cells as a formula.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import errno
import io
import multiprocessing
import os
import re
import signal
import stat
import tempfile
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from ..checks import ParameterError, check_int
from . import checkhost, runner
from .assignments import CHECK_TAG, HIDDEN_TAG, PROFILE, check_cells, check_spec
from .sandbox import Sandbox, sandbox
from .sandbox import limits as sandbox_limits
from .wire import clean

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
_ERROR_WIDTH = 600  # characters of a gradebook row's error column
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
        """The gradebook's error column, all of it written by the grader: why it was not
        graded, or restored and ignored checks, the cells that raised or were stopped, and
        the failed checks (a visible one's reason, a hidden one's name only)."""
        failed = [
            f"hidden check '{c.name}' failed" if c.hidden else f"check '{c.name}': {c.detail}"
            for c in self.checks
            if not c.passed
        ]
        text = " ".join((self.error or "; ".join([*self.notes, *self.problems, *failed])).split())
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
    """The submission with the chapter's checks only: each visible check restored by name from
    the source (its cell, tags and all: a deleted one appended, an edited one replaced, both
    noted), every hidden check inserted after the check it follows in the source, and each
    marked as the grader's (cell metadata `grader`). A check cell the chapter does not have (a
    "bonus", a copy of a hidden check's name, a second copy) runs as the student's code,
    untagged, unscored, and noted. -> (notebook, notes)."""
    nb, notes = copy.deepcopy(submission), []
    graded = check_cells(source, where, tags=(CHECK_TAG, HIDDEN_TAG))
    visible = [n for n, c in graded.items() if HIDDEN_TAG not in _tags(c)]
    after, last = {}, None  # hidden checks, by the name of the visible check before them
    for name, cell in graded.items():
        if HIDDEN_TAG in _tags(cell):
            after.setdefault(last, []).append(name)
        else:
            last = name

    def restored(name: str) -> list:
        made = []
        for each in [name, *after.pop(name, [])]:
            cell = copy.deepcopy(graded[each])
            hidden = HIDDEN_TAG in _tags(cell)
            cell.metadata["grader"] = {"check": each, "points": check_spec(cell, 0)[1],
                                       "hidden": hidden}  # fmt: skip
            made.append(cell)
        return made

    cells, seen = [], set()
    for number, cell in enumerate(nb.cells, 1):
        cell.setdefault("metadata", {}).pop("grader", None)  # only the grader marks a check
        tags = _tags(cell) if isinstance(_tags(cell), list) else []
        cell.metadata["tags"] = tags = [t for t in tags if isinstance(t, str)]  # as papermill's
        if cell.cell_type != "code" or not {CHECK_TAG, HIDDEN_TAG} & set(tags):
            cells.append(cell)
            continue
        name = check_spec(cell, number)[0]
        if CHECK_TAG in tags and name in visible and name not in seen:
            seen.add(name)
            if cell.source.strip() != graded[name].source.strip():
                notes.append(f"check '{name}' was edited and is restored")
            cells.extend(restored(name))
            continue
        cell.metadata["tags"] = [t for t in tags if t not in (CHECK_TAG, HIDDEN_TAG)]
        notes.append(f"ignored: a check cell not in the chapter: '{clean(name, 100)}'")
        cells.append(cell)
    for name in visible:
        if name not in seen:
            notes.append(f"check '{name}' was deleted and is restored")
            cells.extend(restored(name))
    cells.extend(c for rest in list(after.values()) for name in rest for c in restored(name))
    nb.cells = cells
    return nb, notes


def _execute(nb, params: dict, timeout: int, box: Sandbox, imports: dict):
    """Run the student's cells in a fresh folder and sandboxed kernel, past errors, and the
    grader's checks (cells marked `grader`) in a check process (`checkhost`), reading the
    kernel's values as plain data; a cell or check over `timeout` s is interrupted.
    -> (the executed notebook, each check's outcome in its mark; why execution stopped or None)."""
    from nbclient.exceptions import CellTimeoutError
    from papermill.parameterize import parameterize_notebook

    os.environ.setdefault("JUPYTER_PREFER_ENV_PATH", "1")
    nb.metadata["papermill"] = {}
    nb = parameterize_notebook(nb, params, kernel_name="python3", language="python")
    marks = {i: c.metadata["grader"] for i, c in enumerate(nb.cells) if "grader" in c.metadata}
    stopped = None
    with tempfile.TemporaryDirectory(prefix="collapse-grade-") as tmp:
        work, out, checks = Path(tmp) / "work", Path(tmp) / "out", Path(tmp) / "checks"
        for folder in (work, out, checks):
            folder.mkdir(mode=0o700)
        with box.submission(work, out) as confined:
            client = checkhost.grading_client(
                nb, {i: m["hidden"] for i, m in marks.items()}, imports, str(checks),
                timeout=timeout, allow_errors=True, interrupt_on_timeout=True,
                error_on_timeout=_TIMEOUT, kernel_name="python3",
                kernel_manager_class=confined.kernel_manager_class,
                resources={"metadata": {"path": str(work)}})  # fmt: skip
            try:
                client.execute()
            except checkhost.GradingStoppedError:  # SIGINT, SIGTERM: no row for work not graded
                raise KeyboardInterrupt from None
            except CellTimeoutError:
                stopped = f"a cell ran past {timeout} s and did not respond to the interrupt"
            except Exception as err:  # the kernel died or would not start
                stopped = f"{type(err).__name__}: {clean(err)}".rstrip(": ")
            for i, outcome in client.outcomes.items():
                marks[i]["outcome"] = outcome
            stopped = confined.stopped or stopped  # the sandbox's reason: why the kernel died
            where = client.started if client.stuck is None else client.stuck
            if stopped and where is not None:
                stopped += f" (in cell `{_first_line(nb.cells[where])}`)"
    return nb, stopped


def _first_line(cell) -> str:
    return clean((cell.source.strip().splitlines() or [""])[0], 60)


def error_line(output) -> str:
    """`Type: message` of a student's cell that raised, or for a bare failed assert the assert
    line itself: one short line, since the kernel (the student's) wrote all of it."""
    name = clean(output.get("ename", ""), 60) or "error"
    message = clean(output.get("evalue", ""), 120)
    if message:
        return f"{name}: {message}"
    text = runner.ANSI.sub("", "\n".join(map(str, output.get("traceback", []))))
    arrows = [m["line"] for line in text.splitlines() if (m := _ARROW.match(line))]
    return f"{name} at `{clean(arrows[-1], 80)}`" if arrows else name


def _check_result(mark: dict) -> CheckResult:
    """A check's row entry from its grader mark: why a visible check failed (type, capped
    message, or the failing line of the chapter's own code); a hidden one, pass or fail only."""
    outcome, hidden = mark.get("outcome"), mark["hidden"]
    passed = bool(outcome and outcome["passed"])
    if passed or hidden:
        detail = ""
    elif not outcome:
        detail = "not run: execution stopped before this check"
    elif outcome["evalue"]:
        detail = f"{outcome['ename']}: {clean(outcome['evalue'], 120)}"
    else:
        line = outcome.get("line")
        lines = mark["source"].splitlines()
        where = clean(lines[line - 1], 80) if line and line <= len(lines) else ""
        detail = outcome["ename"] + (f" at `{where}`" if where else "")
    return CheckResult(mark["check"], mark["points"], hidden, passed, detail)


def _score(result: Grade, executed, timeout: int, stopped: str | None) -> None:
    """Fill `result` from the executed cells: one CheckResult per check the grader marked, a
    line per other cell that raised or was stopped."""
    cells = [c for c in executed.cells if c.cell_type == "code" and c.source.strip()]
    for cell in cells:
        if "grader" in cell.metadata:
            result.checks.append(_check_result({**cell.metadata["grader"], "source": cell.source}))
            continue
        errors = [error_line(o) for o in cell.get("outputs", []) if o.output_type == "error"]
        if errors:
            where = f"cell In[{cell.execution_count}] `{_first_line(cell)}`"
            result.problems.append(
                f"{where} was stopped after {timeout} s (the time limit per cell)"
                if errors[0].startswith("KeyboardInterrupt")
                else f"{where} raised {errors[0]}"
            )
    if stopped:
        result.problems.insert(0, f"execution stopped: {stopped}")


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
    imports = checkhost.chapter_imports(source)
    executed, stopped = _execute(nb, params, timeout, box, imports)
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


def _grade_file(root: str, path: str, timeout: int, memory_mb: int, limits: dict) -> Grade:
    """One submission in a worker process, its sandbox with `limits` (processes, max_time); a
    failure of the grader itself becomes a row."""
    try:
        with sandbox_limits(**limits):
            return grade(runner.Project.at(Path(root)), Path(path), timeout=timeout,
                         memory_mb=memory_mb)  # fmt: skip
    except Exception as err:  # noqa: BLE001 (a class is never lost to one submission)
        return Grade(Path(path).name, error=f"grader error: {type(err).__name__}: {err}")


def _in_own_process(worker, args: tuple) -> Grade:
    """`worker(*args)` in a fresh process of its own: if that process dies (the OOM killer, a
    signal), only this submission's row says so."""
    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            return pool.submit(worker, *args).result()
    except BrokenProcessPool:
        died = "grader error: the process grading it died (BrokenProcessPool)"
        return Grade(Path(args[1]).name, error=died)


def grade_class(
    project, files, *, timeout=60, memory_mb=4096, processes=None, max_time=None, jobs=1,
    report=print, book=None, worker=_grade_file,
) -> list:  # fmt: skip
    """Grade every file, `jobs` at a time each in a process of its own; `report(grade)` as each
    one finishes, and the gradebook `book` (a checked path, or None) rewritten with every row
    finished so far, so that a grader killed midway leaves them.

    processes, max_time: the sandbox's limits per submission (`sandbox.sandbox`); `worker`
    grades one file in a worker process (tests give one that dies).
    -> the grades in the order of `files`."""
    jobs = check_int("--jobs", jobs, minimum=1)
    check_int("--timeout", timeout, minimum=1)
    limits = {"processes": processes, "max_time": max_time}
    limits = {k: v for k, v in limits.items() if v is not None}
    sandbox(project.root, memory_mb, **limits)  # check every limit, probe before any worker
    args = [(str(project.root), str(f), timeout, memory_mb, limits) for f in files]
    grades = [None] * len(files)

    def finished(i: int, result: Grade) -> None:
        grades[i] = result
        if book is not None:
            write_gradebook(gradebook(grades, files), book)
        report(result)

    if jobs == 1:
        with _sigterm_interrupts():
            for i, a in enumerate(args):
                finished(i, worker(*a))
        return grades
    with _sigterm_interrupts() as terminated, ThreadPoolExecutor(max_workers=jobs) as threads:
        futures = {threads.submit(_in_own_process, worker, a): i for i, a in enumerate(args)}
        try:
            for future in as_completed(futures):
                finished(futures[future], future.result())
        except KeyboardInterrupt:
            if terminated:  # it reached this process alone (Ctrl-C reaches the workers too)
                for child in multiprocessing.active_children():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child.pid, signal.SIGTERM)  # each stops its submission
            raise
    return grades


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM stops the grading as Ctrl-C does, the sandbox cleaned up: by default it ended
    this process alone, and with --jobs its workers graded on, orphans, to their time limit.
    -> a list, not empty once it came."""
    came = []

    def interrupt(signum, frame):
        came.append(signum)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: signals are not ours to handle
        yield came
        return
    try:
        yield came
    finally:
        signal.signal(signal.SIGTERM, previous)


def gradebook(grades, files) -> str:
    """The CSV text: one row per submission (file, assignment, each check's points, total,
    max, error), one column per check of every assignment graded, headed `name (N pt)`; a
    submission whose grade is None (not finished yet) has no row."""
    rows = [(g, path) for g, path in zip(grades, files, strict=True) if g is not None]
    grades = [g for g, _ in rows]
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
    for g, path in rows:
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
    if path.is_symlink():
        raise ParameterError(f"--csv {name}: a symbolic link; give the file's own path")
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
    """Write the CSV atomically and without following a link: a fresh temporary file beside
    it (created exclusively, written through its descriptor, never reopened by name), then a
    rename over the path (which replaces a link there rather than writing through it). Mode
    0600, mkstemp's: a gradebook is the students' marks, for the teacher alone."""
    path = gradebook_path(path)
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(text.encode())
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(partial, path)
    finally:
        if os.path.lexists(partial):
            os.unlink(partial)
