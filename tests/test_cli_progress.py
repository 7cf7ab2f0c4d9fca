"""Progress of the chapters' long loops: written by the kernel to a file the runner names, shown
on the terminal prefixed with the chapter, never recorded in the executed notebook."""

import json
import subprocess
import sys
import textwrap

import pytest
from test_runner import HEADER

from collapse.book import progress, runner


def test_a_bar_writes_whole_lines_to_the_file_the_runner_names(tmp_path, monkeypatch, capsys):
    path = tmp_path / "01-toy.log"
    monkeypatch.setenv(progress.ENV, str(path))
    now = {"delay": 0, "mininterval": 0}  # every step says a line (the default: PERIOD)
    for _ in progress.bar(range(2), desc="sweep", **now):
        for _ in progress.bar(range(3), desc="layers", leave=False, **now):
            pass
    lines = path.read_text().splitlines()
    assert "layers: 100%|##########| 3/3" in "\n".join(lines)
    assert lines[-1].startswith("sweep: 100%|##########| 2/2")
    assert all(line.startswith(("sweep: ", "layers: ")) for line in lines), lines
    assert not any(c in path.read_text() for c in "\r\x1b")  # no redraws, no cursor moves
    again = progress._Lines(str(tmp_path / "again.log"))
    for text in ("\rsweep: 2/2", "\rsweep: 2/2", "\n"):  # an ending bar redraws its status
        again.write(text)
    assert (tmp_path / "again.log").read_text() == "sweep: 2/2\n"
    assert capsys.readouterr().err == ""


def test_a_bar_is_on_stderr_when_asked_for_and_else_silent(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(progress.ENV, raising=False)
    assert list(progress.bar(range(3), desc="steps")) == [0, 1, 2]
    assert capsys.readouterr().err == ""
    list(progress.bar(range(3), desc="steps", shown=True))
    assert "steps: 100%" in capsys.readouterr().err
    # the runner's folder has gone (an interrupted run): the loop runs on, silent
    monkeypatch.setenv(progress.ENV, str(tmp_path / "gone" / "01-toy.log"))
    assert list(progress.bar(range(3), desc="steps", delay=0)) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_the_runner_echoes_each_whole_line_with_its_chapter(tmp_path):
    project = runner.Project(tmp_path)
    said = []
    with runner._progress_folder(project, said.append) as folder:
        assert folder.parent == project.executed_dir
        (folder / "01-toy.log").write_text("sweep: 1/2\nsweep: 2/2\n")
        (folder / "02-other.log").write_text("layers: 5/9\nlayers: 6")  # 6/9 being written
    assert said == ["01-toy | sweep: 1/2", "01-toy | sweep: 2/2", "02-other | layers: 5/9"]
    assert not folder.exists()
    with runner._progress_folder(project, None) as folder:
        assert folder is None


STEPS = HEADER.format(claim="Counts its steps", ranges="    n: {min: 1}") + textwrap.dedent(
    """
    # Steps

    ```{code-cell} ipython3
    :tags: [parameters]
    n = 3
    ```

    ```{code-cell} ipython3
    from collapse import report
    from collapse.book import progress
    steps = sum(1 for _ in progress.bar(range(n), desc="steps", delay=0, mininterval=0))
    counted = report.above("the steps", steps, 0)
    report.check("counted", "the steps are counted", counted, kind="sanity")
    ```
    """
)


@pytest.fixture
def steps(tmp_path):
    """A project of two chapters whose loop reports every step."""
    (tmp_path / "notebooks").mkdir()
    for name in ("01-steps", "02-more-steps"):
        (tmp_path / "notebooks" / f"{name}.md").write_text(STEPS)
    (tmp_path / "notebooks" / "profiles.yml").write_text("book: {}\n")
    return runner.Project(tmp_path)


def _run(project, *args):
    command = [sys.executable, "-m", "collapse", "--root", str(project.root), "run", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def _outputs(project, name):
    cells = json.loads((project.executed_dir / f"{name}.ipynb").read_text())["cells"]
    return [cell.get("outputs") for cell in cells if cell["cell_type"] == "code"]


@pytest.mark.execution
def test_run_shows_progress_when_asked_and_the_notebook_stays_the_same(steps):
    quiet = _run(steps, "01")  # stderr is not a terminal here: no progress unless asked
    assert "| steps" not in quiet.stderr
    before = _outputs(steps, "01-steps")
    shown = _run(steps, "01", "--force", "--progress")
    assert "01-steps | steps: 100%|##########| 3/3" in shown.stderr
    assert "| steps" not in shown.stdout  # stdout keeps the results
    assert _outputs(steps, "01-steps") == before
    assert not list(steps.executed_dir.glob(".progress-*"))


@pytest.mark.execution
def test_progress_of_chapters_run_side_by_side_names_each(steps):
    pytest.importorskip("distributed")
    shown = _run(steps, "--progress", "--executor", "dask", "--workers", "2")
    for name in ("01-steps", "02-more-steps"):
        assert f"{name} | steps: 100%|##########| 3/3" in shown.stderr
