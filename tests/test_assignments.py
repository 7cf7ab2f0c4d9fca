"""Graded exercises: every notebook has one, assignments replace solutions by stubs, and grading
scores each check.

A small toy notebook exercises the grader's paths (unanswered, answered, raising, looping,
tampered checks, a dying kernel) in a few seconds each; one real notebook is graded as
issued and with its solutions put back.
"""

import ast
import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jupytext
import nbformat
import pytest
from conftest import TOY_OPENING, tagged, toy_project
from conftest import run_collapse as collapse

from collapse.book import assignments, cli, runner
from collapse.checks import ParameterError

ROOT = Path(__file__).resolve().parents[1]

TOY = TOY_OPENING + textwrap.dedent(
    """\

    ```{code-cell} ipython3
    x = list(range(n))
    ```

    :::{exercise} Plain
    :label: ex-plain

    Say something.
    :::

    :::{solution} ex-plain
    The plain answer is SECRET-PLAIN.
    :::

    :::{exercise} Sum
    :label: ex-sum

    Store the sum of `x` in `total`.
    :::

    :::{solution-start} ex-sum
    :::

    The gated answer is SECRET-GATED:

    ```{code-cell} ipython3
    :tags: [solution]

    total = sum(x)
    ```

    :::{solution-end}
    :::

    ```{code-cell} ipython3
    :tags: [check]

    # Check: total is the sum of x
    assert total == n * (n - 1) // 2
    ```

    ```{code-cell} ipython3
    :tags: [check]

    # Check: total is an int
    assert isinstance(total, int)
    ```
    """
)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A project with the toy chapter and its assignment."""
    return toy_project(tmp_path_factory.mktemp("toy"), TOY)


def submission(toy, tmp_path, answer=None, edit=None):
    """The toy assignment with its stub replaced by `answer` (None: as issued)
    and `edit(nb)` applied.
    """
    _, issued = toy
    nb = nbformat.read(str(issued), as_version=4)
    if answer is not None:
        tagged(nb, "solution")[0].source = answer
    if edit is not None:
        edit(nb)
    path = tmp_path / "submission.ipynb"
    nbformat.write(nb, str(path))
    return path


def grade(toy, path, *extra):
    root, _ = toy
    return collapse("--root", root, "grade", path, *extra)


def test_assignment_has_stubs_checks_and_fast_parameters(toy):
    _, issued = toy
    nb = nbformat.read(str(issued), as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "SECRET" not in text and "total = sum(x)" not in text
    assert "raise RuntimeError" in tagged(nb, "solution")[0].source
    assert len(tagged(nb, "check")) == 2
    assert tagged(nb, "parameters")[0].source == "n = 10"
    assert nb.metadata["collapse"]["assignment"] == {"notebook": "01-toy", "profile": "fast"}
    assert "jupytext" not in nb.metadata
    assert "ex-plain" in text and "ex-sum" in text  # the exercises stay


def test_an_unanswered_assignment_fails_with_a_clear_line(toy, tmp_path):
    result = grade(toy, submission(toy, tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "raised RuntimeError: exercise ex-sum is not answered yet" in result.stdout
    assert "FAIL    NameError: name 'total' is not defined" in result.stdout
    assert "score: 0/2 points (0/2 checks passed)" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_the_solution_put_back_passes(toy, tmp_path):
    result = grade(toy, submission(toy, tmp_path, "total = sum(x)"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "score: 2/2 points (2/2 checks passed)" in result.stdout


def test_a_wrong_answer_names_the_failing_assert(toy, tmp_path):
    result = grade(toy, submission(toy, tmp_path, "total = sum(x) + 1"))
    assert result.returncode == 1
    assert "AssertionError at `assert total == n * (n - 1) // 2`" in result.stdout
    assert "score: 1/2 points (1/2 checks passed)" in result.stdout


def test_a_raising_answer_is_reported_not_fatal(toy, tmp_path):
    result = grade(toy, submission(toy, tmp_path, "total = sum(x)\nraise ValueError('boom')"))
    assert "raised ValueError: boom" in result.stdout
    assert (
        "score: 2/2 points (2/2 checks passed)" in result.stdout
    )  # total was set before the raise, and the checks still ran
    assert (
        result.returncode == 0
    )  # the status is the checks'; the error is reported above the table
    assert "Traceback" not in result.stdout + result.stderr


def test_an_endless_loop_is_stopped_at_the_time_limit(toy, tmp_path):
    result = grade(toy, submission(toy, tmp_path, "while True:\n    pass"), "--timeout", "3")
    assert result.returncode == 1
    assert (
        "cell In[" in result.stdout
        and "`while True:` was stopped after 3 s (the time limit per cell)" in result.stdout
    )
    assert "score: 0/2 points (0/2 checks passed)" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_a_loop_that_ignores_the_interrupt_stops_grading_with_a_clear_line(toy, tmp_path):
    result = grade(toy, submission(toy, tmp_path, "total = sum(range(10**12))"), "--timeout", "2")
    assert result.returncode == 1
    assert (
        "execution stopped: a cell ran past 2 s and did not respond to the interrupt "
        "(in cell `total = sum(range(10**12))`)" in result.stdout
    )
    assert "not run: execution stopped before this check" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def _kernel_under(pid: int) -> str | None:
    """The command line of an ipykernel descended from process `pid`, or None."""
    parents = {}
    for entry in Path("/proc").iterdir():
        try:
            after_name = (entry / "stat").read_text().rsplit(")", 1)[1]  # state, then ppid
            parents[int(entry.name)] = int(after_name.split()[1])
        except (ValueError, OSError, IndexError):
            continue
    for child in parents:
        ancestor = child
        while ancestor in parents and ancestor != pid:
            ancestor = parents[ancestor]
        if ancestor == pid:
            with contextlib.suppress(OSError):
                line = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                if "ipykernel" in line:
                    return line
    return None


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_signal_stops_grading_and_writes_no_grade(toy, tmp_path, jobs):
    """SIGTERM (like Ctrl-C's SIGINT) while a submission runs stops the grader with status 130
    and writes no row for work never graded: nbclient's own handlers shut the kernel down and
    let grading go on, into 0 points "stopped after 60 s (the time limit per cell)"; with
    --jobs 2 the grader died alone and its workers graded on, orphans."""
    root, _ = toy
    path = submission(toy, tmp_path, "while True:\n    pass")
    book = tmp_path / "grades.csv"
    command = [sys.executable, "-m", "collapse", "--root", str(root), "grade", str(path),
               "--csv", str(book), "--jobs", jobs]  # fmt: skip
    grader = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while (kernel := _kernel_under(grader.pid)) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert kernel, "no kernel started"
    grader.send_signal(signal.SIGTERM)
    out, err = grader.communicate(timeout=120)
    assert (grader.returncode, err.strip()) == (130, "collapse: interrupted"), out + err
    assert "points" not in out and not book.exists()
    folder = re.search(r"(/\S*collapse-grade-[^/\s]+)/", kernel)  # the kernel's work folder
    assert folder and not os.path.exists(folder.group(1)), kernel


def test_a_dying_kernel_is_reported(toy, tmp_path):
    result = grade(toy, submission(toy, tmp_path, "import os\nos._exit(3)"))
    assert result.returncode == 1
    assert "execution stopped: DeadKernelError" in result.stdout
    assert "score: 0/2 points (0/2 checks passed)" in result.stdout


def test_checks_come_from_the_source_notebook(toy, tmp_path):
    """Weakening or deleting a check does not pass it: the grader restores the source's checks."""

    def tamper(nb):
        first, second = tagged(nb, "check")
        # a check weakened so that anything passes
        first.source = "# Check: total is the sum of x\nassert total is not None"
        nb.cells.remove(second)

    result = grade(toy, submission(toy, tmp_path, "total = 1.5", edit=tamper))
    assert result.returncode == 1
    assert "score: 0/2 points (0/2 checks passed)" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["grade", "missing.ipynb"], "missing.ipynb: no such file or folder"),
        (["grade", "plain.ipynb", "--timeout", "0"], "--timeout must be an int >= 1, got 0"),
        (["grade", "plain.ipynb", "--jobs", "0"], "--jobs must be an int >= 1, got 0"),
        (["grade", "plain.ipynb", "--memory", "64"], "--memory must be an int >= 256, got 64"),
        (["grade", "plain.ipynb", "--csv", "nowhere/g.csv"], "nowhere does not exist"),
        (["assignments", "99"], "notebook must be one of 01-toy"),
    ],
)
def test_bad_input_exits_2_with_one_line(toy, tmp_path, capsys, args, message):
    root, _ = toy
    (tmp_path / "notes.txt").write_text("not json")
    nbformat.write(nbformat.v4.new_notebook(), str(tmp_path / "plain.ipynb"))
    args = [str(tmp_path / a) if a.endswith((".ipynb", ".txt", ".csv")) else a for a in args]
    assert (
        cli.main(["--root", str(root), *args]) == 2
    )  # in-process: a subprocess per case costs seconds of imports
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


def test_strip_solutions_removes_every_solution():
    nb = jupytext.reads(TOY, fmt="md:myst")
    student = assignments.strip_solutions(nb, stub=False)
    text = "\n".join(c.source for c in student.cells)
    assert "SECRET" not in text and not tagged(student, "solution") and "solution" not in text
    assert len(tagged(student, "check")) == 2 and text.count(":::{exercise}") == 2
    issued = assignments.strip_solutions(nb, stub=True)
    assert "SECRET" not in "\n".join(c.source for c in issued.cells)
    assert tagged(issued, "solution")[0].source.endswith(
        'raise RuntimeError("exercise ex-sum is not answered yet")'
    )


START, LAST_CHECK = (
    ":::{solution-start} ex-sum\n:::\n",
    ":tags: [check]\n\n# Check: total is an int",
)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.split(":::{solution-end}")[0], "gate of ex-sum is never closed"),
        (
            lambda s: s.replace(":::{solution-end}\n:::\n", ":::{solution-end}\n"),
            "never closed (no `:::` line in its cell)",
        ),
        (lambda s: s.replace(START, START + START), "unbalanced"),
        (
            lambda s: s.replace(
                "The gated answer", ":::{solution} ex-sum\nnested\n:::\n\nThe gated answer"
            ),
            "unbalanced",
        ),
        (
            lambda s: s.replace(":tags: [solution]\n", ""),
            "inside a {solution-start} gate without the tag 'solution'",
        ),
        (
            lambda s: s.replace(LAST_CHECK, LAST_CHECK.replace("check", "solution")),
            "outside a {solution-start} gate",
        ),
    ],
)
def test_malformed_solutions_are_one_line_errors(edit, message):
    source = edit(TOY)
    assert source != TOY
    with pytest.raises(ParameterError, match=re.escape(message)):
        assignments.strip_solutions(jupytext.reads(source, fmt="md:myst"), stub=True)


def bound_names(source: str) -> set:
    """Names a cell binds at top level (assignments, defs, imports)."""
    names = set()
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            names |= (
                {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                if target is not None
                else set()
            )
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


@pytest.mark.parametrize("name", sorted(runner.Project(ROOT).notebooks()))
def test_every_notebook_has_a_graded_exercise_that_fails_as_issued(name):
    """Each check cell reads a name that only a solution cell binds, so an unanswered assignment
    fails every check.
    """
    notebook = runner.Project(ROOT).select([name])[0]
    nb = notebook.source()
    solutions, checks = tagged(nb, "solution"), assignments.check_cells(nb, name)
    assert solutions and checks, (
        f"{name}: needs a code cell tagged 'solution' inside a {{solution-start}} gate "
        "and cells tagged 'check'"
    )
    graded = {id(c) for c in [*solutions, *checks.values()]}
    others = [c for c in nb.cells if c.cell_type == "code" and id(c) not in graded]
    answers = set().union(*(bound_names(c.source) for c in solutions)) - set().union(
        *(bound_names(c.source) for c in others)
    )
    for check_name, cell in checks.items():
        loaded = {n.id for n in ast.walk(ast.parse(cell.source)) if isinstance(n, ast.Name)}
        assert loaded & answers, (
            f"{name}: check {check_name!r} reads none of the answer's names {sorted(answers)}"
        )
    issued = assignments.make_assignment(runner.Project(ROOT), notebook)
    assert all("raise RuntimeError" in c.source for c in tagged(issued, "solution"))
    assert all(s.source not in "\n".join(c.source for c in issued.cells) for s in solutions)


@pytest.mark.execution
def test_a_real_assignment_fails_as_issued_and_passes_with_its_solutions(tmp_path):
    name = "04-layernorm-orthogonal"  # about 5 s in the fast profile
    result = collapse("--root", ROOT, "assignments", name, "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    issued = tmp_path / f"{name}.ipynb"
    as_issued = collapse("--root", ROOT, "grade", issued, offline=True)  # grading needs no network
    assert as_issued.returncode == 1, as_issued.stdout + as_issued.stderr
    assert "is not answered yet" in as_issued.stdout and "score: 0/" in as_issued.stdout
    nb = nbformat.read(str(issued), as_version=4)
    answers = tagged(runner.Project(ROOT).select([name])[0].source(), "solution")
    for stub, answer in zip(tagged(nb, "solution"), answers, strict=True):
        stub.source = answer.source
    nbformat.write(nb, str(tmp_path / "solved.ipynb"))
    result = collapse("--root", ROOT, "grade", tmp_path / "solved.ipynb", offline=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout
