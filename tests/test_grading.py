"""Grading a class: points, hidden checks, the gradebook, and every submission in a sandbox of
its own.

A toy project exercises points and hidden checks in seconds. Then one class of chapter 01's
assignment is graded by one `collapse grade DIR --csv --jobs 2`, on a copy of the project, so
that nothing a submission does can reach this checkout: solved; unsolved as issued; an endless
loop; a deleted check; one that tries the network; one that allocates far too much memory; one
that answers by calling the library; one that tries to rewrite the chapter; and every attack on
the checks (tests/attacks_checks.py) and on the sandbox (tests/attacks_sandbox.py). One class
for all: each submission costs a kernel and the chapter's fast run.
"""

import copy
import csv
import textwrap
from pathlib import Path

import attacks_checks
import attacks_sandbox
import jupytext
import nbformat
import pytest
from conftest import TOY_OPENING, copy_sources, tagged, toy_project
from conftest import run_collapse as collapse

from collapse.book import assignments, grading, runner, sandbox
from collapse.checks import ParameterError

ROOT = Path(__file__).resolve().parents[1]

TOY = TOY_OPENING + textwrap.dedent(
    """\

    :::{exercise} Sum
    :label: ex-sum

    Write `total(k)`, the sum of 0, ..., k - 1.
    :::

    :::{solution-start} ex-sum
    :::

    ```{code-cell} ipython3
    :tags: [solution]

    def total(k):
        return k * (k - 1) // 2
    ```

    :::{solution-end}
    :::

    ```{code-cell} ipython3
    :tags: [check]

    # Check (2 points): the sum up to n
    assert total(n) == sum(range(n))
    ```

    ```{code-cell} ipython3
    :tags: [hidden-check]

    # Check (3 points): HIDDEN-SECRET sizes no loop could sum
    assert total(10**12) == 10**12 * (10**12 - 1) // 2
    ```

    ```{code-cell} ipython3
    :tags: [check]

    # Check: an int
    assert isinstance(total(n), int)
    ```
    """
)


def answered(issued: Path, out: Path, answer: str | None, edit=None) -> Path:
    """A copy of the assignment with its (first) stub replaced by `answer` and `edit` applied."""
    nb = nbformat.read(str(issued), as_version=4)
    if answer is not None:
        tagged(nb, "solution")[0].source = answer
    if edit is not None:
        edit(nb)
    nbformat.write(nb, str(out))
    return out


def read_csv(path: Path) -> dict:
    return {Path(row["file"]).stem: row for row in csv.DictReader(path.open())}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A project with the toy chapter and its assignment."""
    return toy_project(tmp_path_factory.mktemp("toy"), TOY)


def test_points_are_read_from_the_first_line():
    cell = nbformat.v4.new_code_cell
    assert assignments.check_spec(cell("# Check (2 points): a name\nassert 1"), 1) == (
        "a name",
        2,
    )
    assert assignments.check_spec(cell("# Check (1 point): one\nassert 1"), 1) == ("one", 1)
    assert assignments.check_spec(cell("# Check: plain\nassert 1"), 1) == ("plain", 1)
    assert assignments.check_spec(cell("assert 1"), 4) == ("check 4", 1)


def test_hidden_checks_stay_out_of_the_assignment_and_the_student_copy(toy):
    _, issued = toy
    text = "\n".join(c.source for c in nbformat.read(str(issued), as_version=4).cells)
    assert "HIDDEN-SECRET" not in text and "10**12" not in text
    assert "# Check (2 points): the sum up to n" in text  # the points show in the assignment
    student = assignments.strip_solutions(jupytext.reads(TOY, fmt="md:myst"), stub=False)
    assert not tagged(student, "hidden-check") and len(tagged(student, "check")) == 2


@pytest.mark.execution
def test_the_student_copy_keeps_no_source_in_its_metadata():
    """papermill records a notebook passed as an object whole, hidden checks included."""
    nb = jupytext.reads(TOY, fmt="md:myst")
    nb.metadata["papermill"] = {"input_path": jupytext.reads(TOY, fmt="md:myst")}
    student = assignments.strip_solutions(nb, stub=False, where="01-toy.ipynb")
    assert student.metadata["papermill"]["input_path"] == "01-toy.ipynb"
    assert "HIDDEN-SECRET" not in nbformat.writes(student)


@pytest.mark.execution
def test_hidden_checks_come_back_and_every_check_scores_its_points(toy, tmp_path):
    root, issued = toy
    folder = tmp_path / "class"
    folder.mkdir()
    answered(issued, folder / "right.ipynb", "def total(k):\n    return k * (k - 1) // 2")
    loop = "def total(k):\n    s = 0\n    for i in range(k):\n        s += i\n    return s"
    answered(issued, folder / "loop.ipynb", loop)
    answered(issued, folder / "float.ipynb", "def total(k):\n    return k * (k - 1) / 2")
    (folder / "notes.txt").write_text("not a notebook")
    plain = nbformat.v4.new_notebook()
    nbformat.write(plain, str(folder / "plain.ipynb"))
    alien = nbformat.read(str(issued), as_version=4)
    alien.metadata["collapse"]["assignment"]["notebook"] = "07-elsewhere"
    nbformat.write(alien, str(folder / "alien.ipynb"))
    book = tmp_path / "grades.csv"
    result = collapse("--root", root, "grade", folder, "--csv", book, "--timeout", "10")
    assert result.returncode == 1, result.stdout + result.stderr
    rows = read_csv(book)
    assert list(rows) == ["alien", "float", "loop", "notes", "plain", "right"]  # sorted
    header = next(csv.reader(book.open()))
    assert header == [
        "file", "assignment", "the sum up to n (2 pt)",
        "HIDDEN-SECRET sizes no loop could sum (3 pt, hidden)", "an int (1 pt)",
        "total", "max", "error",
    ]  # fmt: skip
    assert (rows["right"]["total"], rows["right"]["max"]) == ("6", "6")
    # a loop over 10^12 numbers is interrupted at the time limit: the hidden check fails
    assert rows["loop"]["total"] == "3"
    assert rows["float"]["total"] == "2"  # right values, wrong type: only the first check
    assert "not a Jupyter notebook" in rows["notes"]["error"] and rows["notes"]["total"] == ""
    assert "not made by `collapse assignments`" in rows["plain"]["error"]
    assert rows["alien"]["error"] == "answers an unknown assignment '07-elsewhere'"
    assert "right.ipynb: 01-toy, 6/6 points (3/3 checks passed)" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_source_checks_are_restored_and_hidden_ones_follow_their_check(toy):
    _, issued = toy
    source = jupytext.reads(TOY, fmt="md:myst")
    nb = nbformat.read(str(issued), as_version=4)
    first, second = tagged(nb, "check")
    first.source = "# Check (2 points): the sum up to n\nassert total is not None"  # weakened
    nb.cells.remove(second)  # deleted
    restored, notes = grading._with_source_checks(nb, source, "01-toy.md")
    names = [
        assignments.check_spec(c, 0)[0]
        for c in restored.cells
        if {"check", "hidden-check"} & set(c.metadata.get("tags", []))
    ]
    assert names == ["the sum up to n", "HIDDEN-SECRET sizes no loop could sum", "an int"]
    assert tagged(restored, "check")[0].source == tagged(source, "check")[0].source
    assert notes == [
        "check 'the sum up to n' was edited and is restored",
        "check 'an int' was deleted and is restored",
    ]


def test_collect_and_the_gradebook_are_checked(tmp_path):
    with pytest.raises(ParameterError, match="no such file or folder"):
        grading.collect([tmp_path / "missing"])
    with pytest.raises(ParameterError, match="no submissions found"):
        grading.collect([tmp_path])
    with pytest.raises(ParameterError, match="does not exist"):
        grading.write_gradebook("x", tmp_path / "nowhere" / "g.csv")
    grading.write_gradebook("a,b\n", tmp_path / "g.csv")
    assert (tmp_path / "g.csv").read_text() == "a,b\n"
    assert not list(tmp_path.glob(".*partial"))


def test_no_hidden_check_reaches_an_assignment():
    """Every line of every hidden check (beyond a bare keyword) is absent from the assignments."""
    project = runner.Project(ROOT)
    for notebook in project.select([]):
        source = notebook.source()
        hidden = tagged(source, "hidden-check")
        assert hidden, f"{notebook.name}: its graded exercise has no hidden check"
        issued = assignments.make_assignment(project, notebook)
        text = "\n".join(c.source for c in issued.cells)
        # lines that are hidden-check text only, not text the chapter also shows
        elsewhere = "\n".join(c.source for c in source.cells if c not in hidden)
        for cell in hidden:
            for line in (x.strip() for x in cell.source.splitlines()):
                if len(line) > 12 and line not in elsewhere:
                    assert line not in text, f"{notebook.name}: {line!r}"


# --- a class of chapter 01's assignment ------------------------------------------------------

CHAPTER = "01-mask-radius"
SOLVED = """\
def window_radius(n, w, causal):
    farthest = n - 1 if causal else n // 2
    return math.ceil(farthest / w)
"""
LIBRARY = """\
def window_radius(n, w, causal):
    name = "causal_sliding_window" if causal else "sliding_window"
    return masks.radius(masks.make(name, n, window=w))
"""


def _delete_first_check(nb):
    nb.cells.remove(tagged(nb, "check")[0])


GRADED = ":::{exercise} The radius of a window, in closed form (graded)"


def graded_part(chapter: Path) -> None:
    """Cut chapter 01 (in a scratch project) to what its graded exercise needs: its header and
    parameters, the values the checks read (`n_tokens`, `graph`), then the exercise, its
    solution and its checks verbatim. Graded, a submission runs as against the chapter, its
    checks the same, in a few seconds rather than the whole chapter's run: a class of forty
    submissions is affordable."""
    nb = jupytext.read(chapter)
    cells = nb.cells
    params = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
    start = next(i for i, c in enumerate(cells) if GRADED in c.source)
    exercise = copy.deepcopy(cells[start])
    exercise.source = exercise.source[exercise.source.index(GRADED) :]
    values = nbformat.v4.new_code_cell(
        "import math\n\nfrom collapse import masks, theory\n\n"
        "names = ['sliding_window', 'causal_sliding_window']\n"
        "graph = theory.mask_table({m: masks.make(m, n_tokens) for m in names})"
    )
    nb.cells = [*cells[: params + 1], values, exercise, *cells[start + 1 :]]
    jupytext.write(nb, chapter, fmt="md:myst")


@pytest.fixture(scope="module")
def chapter_class(tmp_path_factory):
    """The class, graded: (project copy, CSV rows, the command's output, the sandbox)."""
    root = copy_sources(tmp_path_factory.mktemp("project"))
    graded_part(root / "notebooks" / f"{CHAPTER}.md")
    issued = root / "issued"
    result = collapse("--root", root, "assignments", CHAPTER, "--out", issued)
    assert result.returncode == 0, result.stderr
    issued = issued / f"{CHAPTER}.ipynb"
    folder = root / "class"
    folder.mkdir()
    chapter = root / "notebooks" / f"{CHAPTER}.md"
    network = (
        "import urllib.request\nurllib.request.urlopen('https://pypi.org/simple/', timeout=10)"
    )
    for name, answer, edit in [
        ("solved", SOLVED, None),
        ("unsolved", None, None),
        ("endless", "while True:\n    pass", None),
        ("deleted", SOLVED, _delete_first_check),
        ("network", f"{network}\n{SOLVED}", None),
        ("memory", f"import numpy as np\njunk = np.ones(6 * 10**8)\n{SOLVED}", None),  # 4.8 GB
        ("library", LIBRARY, None),
        ("tamper", f"open({str(chapter)!r}, 'a').write('# graded by me')\n{SOLVED}", None),
        *((name, *attack) for name, attack in attacks_checks.ATTACKS.items()),
        *((name, *attack) for name, attack in attacks_sandbox.ATTACKS.items()),
    ]:
        answered(issued, folder / f"{name}.ipynb", answer, edit)
    book = root / "grades.csv"
    before = chapter.read_text()
    result = collapse(
        "--root", root, "grade", folder, "--csv", book, "--jobs", "2", "--timeout", "30",
        "--memory", "3072", timeout=1800,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr  # not every student passed
    box = sandbox.sandbox(root, 3072)
    return root, read_csv(book), result.stdout, box, before == chapter.read_text()


def test_a_class_is_graded_into_a_gradebook(chapter_class):
    _, rows, out, _, _ = chapter_class
    attacks = [*attacks_checks.ATTACKS, *attacks_sandbox.ATTACKS]
    assert sorted(rows) == sorted(
        ["solved", "unsolved", "endless", "deleted", "network", "memory", "library", "tamper",
         *attacks]
    )  # fmt: skip
    full = rows["solved"]["max"]
    assert int(full) >= 5 and rows["solved"]["total"] == full and rows["solved"]["error"] == ""
    assert rows["unsolved"]["total"] == "0" and "is not answered yet" in rows["unsolved"]["error"]
    assert rows["endless"]["total"] == "0"
    assert "`while True:` was stopped after 30 s" in rows["endless"]["error"]
    assert (
        rows["deleted"]["total"] == full
        and "was deleted and is restored" in (rows["deleted"]["error"])
    )
    # killed at the submission's memory limit (a cgroup), or MemoryError (a limit per process)
    assert rows["memory"]["total"] == "0"
    assert "memory limit" in rows["memory"]["error"] or "MemoryError" in rows["memory"]["error"]
    # the library answers the visible checks but cannot build a mask of 10^9 tokens
    hidden = [k for k in rows["library"] if k.endswith(", hidden)")]
    assert hidden and all(rows["library"][k] == "0" for k in hidden)
    visible = [k for k in rows["library"] if k.endswith(" pt)")]
    assert visible and all(rows["library"][k] == rows["solved"][k] for k in visible)
    assert 0 < int(rows["library"]["total"]) < int(full)
    assert out.startswith(
        f"grading {8 + len(attacks)} submission(s), 2 at a time: fast profile, 30 s per cell"
    )
    assert "Traceback" not in out


def test_the_sandbox_keeps_student_code_off_the_network_and_the_project(chapter_class):
    _, rows, out, box, unchanged = chapter_class
    if not box.offline:
        assert "NETWORK NOT ISOLATED" in out
        pytest.skip("SKIPPED LOUDLY: `unshare -n` is not permitted here: the network is open")
    assert "no network (unshare -n)" in out
    assert rows["network"]["total"] == "0" and "URLError" in rows["network"]["error"]
    if not box.readonly:
        pytest.skip("SKIPPED LOUDLY: no mount namespace here: the project is visible")
    assert "project hidden, private HOME and /tmp (unshare -m)" in out
    assert unchanged, "a submission changed the chapter it was graded against"
    # the chapter is out of the kernel's sight: an empty folder is mounted over the project
    assert rows["tamper"]["total"] == "0" and "FileNotFoundError" in rows["tamper"]["error"]


def test_no_attack_on_the_checks_scores(chapter_class):
    """Every trick in the kernel or the notebook scores what an unsolved notebook scores, and
    no row quotes the hidden check."""
    _, rows, _, _, _ = chapter_class
    assert attacks_checks.check_rows(rows) == []


def test_no_attack_on_the_sandbox_scores(chapter_class):
    _, rows, out, box, _ = chapter_class
    refused = attacks_sandbox.refused(box)
    assert attacks_sandbox.check_rows(rows, skip=refused) == []
    if refused:
        pytest.skip(f"SKIPPED LOUDLY: this machine refuses the defence against {refused}")
