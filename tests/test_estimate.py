"""Planning a run: each notebook's cost cell, the ETA calibrated from its recorded run, and
`collapse run --dry-run`, which executes nothing."""

import json

import pytest
from conftest import TOY_OPENING, run_collapse

from collapse import cost
from collapse.book import estimate, runner
from collapse.checks import ParameterError

COST_CELL = """
```{code-cell} ipython3
:tags: [cost, hide-cell]
from collapse import cost

work = cost.Work(flops=2 * n**3, peak_bytes=3 * 8 * n**2)
```
"""

BODY = """
```{code-cell} ipython3
import torch

A = torch.ones(n, n, dtype=torch.float64)
print(float((A @ A).sum()))
```
"""


@pytest.fixture
def project(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "01-toy.md").write_text(TOY_OPENING + COST_CELL + BODY)
    (notebooks / "02-nocost.md").write_text(TOY_OPENING + BODY)
    (notebooks / "profiles.yml").write_text(
        "fast:\n  01-toy: {n: 10}\nbook: {}\npaper:\n  01-toy: {n: 400}\n"
    )
    return runner.Project(tmp_path)


def planned(project, profile, names=("01",)):
    return runner.plan(project, list(names), profile, {})


def test_the_cost_cell_is_evaluated_on_the_profiles_parameters_alone(project):
    ((notebook, params),) = planned(project, "paper")
    assert estimate.work(notebook, params) == cost.Work(2 * 400**3, 3 * 8 * 400**2)
    ((notebook, params),) = planned(project, "fast")
    assert estimate.work(notebook, params).flops == 2 * 10**3


def test_a_chapter_without_a_cost_cell_or_work_is_one_clear_error(project, tmp_path):
    ((notebook, params),) = planned(project, "book", ["02"])
    with pytest.raises(ParameterError, match="02-nocost: needs exactly one cell tagged 'cost'"):
        estimate.work(notebook, params)
    path = tmp_path / "notebooks" / "01-toy.md"
    path.write_text(path.read_text().replace("work = cost.Work", "wrk = cost.Work"))
    ((notebook, params),) = planned(project, "book")
    with pytest.raises(ParameterError, match="01-toy: its cost cell must set work"):
        estimate.work(notebook, params)
    result = run_collapse("--root", project.root, "run", "02", "--dry-run")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr


@pytest.mark.execution
def test_the_eta_scales_the_recorded_run_by_the_work(project):
    """With the GEMM rate measured once per process, the ETA is the recorded seconds times
    the ratio of the work: the rate cancels."""
    ((notebook, params),) = planned(project, "fast")
    (no_record,) = estimate.estimate(project, [(notebook, params)], "fast")
    assert no_record.basis.startswith(f"assumed {estimate.DEFAULT_EFFICIENCY:g}")
    assert not no_record.cached
    runner.execute(project, notebook, params, "fast")
    output = project.executed_dir / "01-toy.ipynb"
    executed = json.loads(output.read_text())
    assert executed["metadata"]["collapse"]["device"] == "cpu"
    (cached,) = estimate.estimate(project, [(notebook, params)], "fast")
    assert cached.cached and "its fast run" in cached.basis
    assert not estimate.estimate(project, [(notebook, params)], "fast", force=True)[0].cached
    executed["metadata"]["collapse"]["seconds"] = 1e6 + 7.0  # slow cells, 7 s outside them
    for cell in executed["cells"]:
        cell["metadata"]["papermill"]["duration"] = (
            1e6 if "A @ A" in "".join(cell["source"]) else 0
        )
    output.write_text(json.dumps(executed))
    (paper,) = estimate.estimate(project, planned(project, "paper"), "paper")
    assert paper.seconds == pytest.approx(7.0 + 1e6 * 400**3 / 10**3, rel=1e-9)
    assert paper.device == "cpu" and paper.device_seconds == paper.seconds


def test_dry_run_prints_the_plan_and_executes_nothing(project):
    result = run_collapse("--root", project.root, "run", "01", "--profile", "paper", "--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("paper profile:") and "GFLOP/s" in lines[0]
    (row,) = [line for line in lines if line.startswith("01-toy")]
    assert "128 MFLOP" in row and "(cpu)" in row and "3.66 MiB" in row
    assert lines[-1].startswith("total") and "1 of 1 notebooks to run" in lines[-1]
    assert not project.executed_dir.exists()


@pytest.mark.execution
def test_the_paper_profile_prints_its_plan_before_it_runs(project):
    result = run_collapse("--root", project.root, "run", "01", "--profile", "paper")
    assert result.returncode == 0, result.stderr
    assert "01-toy" in result.stderr and "\ntotal" in result.stderr
    assert result.stderr.index("\ntotal") < result.stderr.index("paper profile: each sweep")


@pytest.mark.parametrize("profile", runner.PROFILES)
def test_every_chapter_has_a_cost_cell_that_grows_with_the_profile(profile):
    project = runner.Project.find()
    fast = {nb.name: estimate.work(nb, p) for nb, p in runner.plan(project, [], "fast", {})}
    for notebook, params in runner.plan(project, [], profile, {}):
        work = estimate.work(notebook, params)
        assert work.flops > 0 and work.peak_bytes > 0, notebook.name
        assert work.flops >= fast[notebook.name].flops, notebook.name


def test_every_cost_cell_is_one_call_of_the_chapters_workload_formula():
    """The cost cells come from one helper: `workloads.of(slug, globals())`, one formula per
    chapter and none for a chapter that is gone."""
    from collapse import workloads

    project = runner.Project.find()
    slugs = []
    for notebook in project.notebooks().values():
        slug = notebook.name[3:]
        cells = notebook.source().cells
        (cell,) = [c for c in cells if estimate.COST_TAG in c.metadata.get("tags", [])]
        code = [line for line in cell.source.splitlines() if line and not line.startswith("#")]
        assert code == [
            "from collapse import workloads",
            f'work = workloads.of("{slug}", globals())',
        ], notebook.name
        slugs.append(slug)
    assert workloads.slugs() == sorted(slugs)
