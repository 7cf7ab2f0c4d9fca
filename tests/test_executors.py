"""Executors: a Dask LocalCluster (2 worker processes) gives the local executor's sweeps and
notebooks."""

import shutil

import pandas as pd
import pytest
from test_runner import RAISES, TOY

from collapse import chunks, inputs, masks, san, sweep
from collapse.book import executors, runner
from collapse.checks import ParameterError

NOTEBOOKS = [
    "07-temperature",
    "16-width",
]  # a SAN sweep and a Mind-the-Gap stack, both short in the fast profile


@pytest.fixture(scope="module")
def dask():
    pytest.importorskip("distributed")
    with executors.make("dask", workers=2) as executor:
        yield executor


@pytest.mark.parametrize(
    "kind, kw, message",
    [
        ("ray", {}, "executor must be one of local, dask"),
        ("local", {"scheduler": "tcp://127.0.0.1:8786"}, "need --executor dask"),
        ("local", {"workers": 4}, "need --executor dask"),
        (
            "dask",
            {"scheduler": "tcp://127.0.0.1:8786", "workers": 4},
            "with --scheduler the cluster has its own",
        ),
        ("dask", {"workers": 0}, "workers must be an int >= 1"),
    ],
)
def test_bad_executor_options_are_one_line_errors(kind, kw, message):
    pytest.importorskip("distributed")
    with pytest.raises(ParameterError, match=message):
        executors.make(kind, **kw)


def test_a_sweep_on_dask_is_the_local_sweep_bit_for_bit(dask, tmp_path):
    configs = {
        v: san.SANConfig.bert(variant=v, n_layers=3, d=64, n_heads=4)
        for v in ("attention", "skip_ln", "full")
    }
    mask_set = {m: masks.make(m, 32) for m in ("complete", "causal_sliding_window")}
    X0 = inputs.embedding_inputs(6, 32, 64, seed=3)
    grid = dict(d_qk=[1.0, None], seed=[0, 1], batch_size=2)
    local = chunks.sweep(X0, configs, mask_set, **grid, folder=tmp_path / "local")
    remote = chunks.sweep(X0, configs, mask_set, **grid, folder=tmp_path / "dask", executor=dask)
    pd.testing.assert_frame_equal(remote, local, check_exact=True)
    written = lambda name: {p.name: p.read_bytes() for p in (tmp_path / name).glob("chunk-*.npy")}  # noqa: E731
    assert written("dask") == written("local") and len(written("local")) == 6


def test_notebooks_on_dask_give_the_local_verdicts(dask, fast_book, tmp_path):
    local_root, result = fast_book
    assert result.returncode == 0, result.stderr[-2000:]
    shutil.copytree(local_root / "notebooks", tmp_path / "notebooks")
    project = runner.Project(tmp_path)
    planned = runner.plan(project, NOTEBOOKS, "fast", {})
    results = {r.name: r for r in runner.execute_all(project, planned, "fast", executor=dask)}
    assert set(results) == set(NOTEBOOKS) and {r.status for r in results.values()} == {"executed"}
    keys = ("key", "measured", "expected", "passed", "profile")
    for name in NOTEBOOKS:
        local = runner.Project(local_root).executed_dir / f"{name}.verdicts.json"
        assert [{k: r[k] for k in keys} for r in results[name].records] == [
            {k: r[k] for k in keys} for r in pd.read_json(local).to_dict("records")
        ]
        assert (project.executed_dir / f"{name}.ipynb").is_file()


@pytest.mark.execution
def test_a_notebook_run_on_dask_is_cached_like_a_local_one(dask, tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01-toy.md").write_text(TOY)
    (tmp_path / "notebooks" / "profiles.yml").write_text("book: {}\n")
    project = runner.Project(tmp_path)
    planned = runner.plan(project, [], "book", {})
    (first,) = runner.execute_all(project, planned, "book", executor=dask)
    (local,) = runner.execute_all(project, planned, "book", force=True)
    (again,) = runner.execute_all(project, planned, "book", executor=dask)
    assert (first.status, local.status, again.status) == ("executed", "executed", "cached")
    assert (
        first.records == local.records == again.records
        and first.records[0]["measured"] == "the sum: $6$"
    )


@pytest.mark.execution
def test_a_raising_notebook_on_dask_names_its_cell(dask, tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01-raises.md").write_text(RAISES)
    (tmp_path / "notebooks" / "profiles.yml").write_text("book: {}\n")
    project = runner.Project(tmp_path)
    with pytest.raises(
        runner.NotebookError,
        match=r"notebook 01-raises failed in cell .*broken on purpose with n=1",
    ):
        list(
            runner.execute_all(
                project, runner.plan(project, [], "book", {}), "book", executor=dask
            )
        )
    assert not list((tmp_path / "book" / "executed").glob("*.ipynb"))


def test_a_running_scheduler_is_used_by_its_address(dask):
    configs = {"attention": san.SANConfig.bert(variant="attention", n_layers=2, d=16, n_heads=2)}
    mask_set = {"causal": masks.make("causal", 8)}
    X0 = inputs.embedding_inputs(3, 8, 16, seed=1)
    with executors.make("dask", scheduler=dask.client.scheduler.address) as remote:
        assert (remote.name, remote.workers) == ("dask", 2)
        got = chunks.sweep(X0, configs, mask_set, batch_size=1, executor=remote)
    pd.testing.assert_frame_equal(
        got, sweep.sweep(X0, configs, mask_set, batch_size=1), check_exact=True
    )
