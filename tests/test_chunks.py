"""Chunked, resumable sweeps: same frame as sweep.sweep, atomic chunk files, bit-identical resume
after kill -9."""

import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from collapse import chunks, inputs, masks, san, sweep
from collapse.book import executors
from collapse.checks import ParameterError

N, D = 10, 12
GRID = dict(d_qk=[0.25, None], seed=[1, 2], metrics=("mu", "stable_rank"), batch_size=2)


def grid():
    configs = {
        v: san.SANConfig.bert(variant=v, n_layers=2, d=D, n_heads=3, d_ff=20)
        for v in ("attention", "full")
    }
    configs["normal"] = san.SANConfig.bert(
        variant="ln", n_layers=2, d=D, n_heads=3, init="bert_normal"
    )  # a second weight group
    return (
        inputs.embedding_inputs(5, N, D, seed=5),
        configs,
        {m: masks.make(m, N) for m in ("complete", "causal")},
    )


class Counting(executors.LocalExecutor):
    """The local executor, counting the jobs it runs."""

    def __init__(self):
        self.jobs = 0

    def map(self, fn, items):
        for index, result in super().map(fn, items):
            self.jobs += fn is chunks._compute
            yield index, result


def chunk_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.glob("chunk-*.npy"))}


def test_chunked_sweep_is_sweep_bit_for_bit_and_reuses_its_chunks(tmp_path):
    X0, configs, mask_set = grid()
    expected = sweep.sweep(X0, configs, mask_set, **GRID)
    first, again = Counting(), Counting()
    got = chunks.sweep(
        X0, configs, mask_set, **GRID, folder=tmp_path, executor=first, progress=False
    )
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    n_jobs = len(sweep.plan(X0, configs, mask_set, **GRID).jobs)
    assert n_jobs == 2 * 2 * 3 and first.jobs == n_jobs  # seeds x weight groups x sample batches
    assert len(chunk_bytes(tmp_path)) == n_jobs and not list(tmp_path.glob(".*.partial"))
    pd.testing.assert_frame_equal(
        chunks.sweep(X0, configs, mask_set, **GRID, folder=tmp_path, executor=again),
        expected,
        check_exact=True,
    )
    assert again.jobs == 0


KILLED = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from test_chunks import GRID, Counting, grid
from collapse import chunks

class KilledAfter(Counting):
    def map(self, fn, items):
        for index, result in super().map(fn, items):
            if self.jobs > {keep}:
                os.kill(os.getpid(), signal.SIGKILL)  # as `kill -9`: no cleanup, no finally
            yield index, result

X0, configs, mask_set = grid()
chunks.sweep(X0, configs, mask_set, **GRID, folder={folder!r}, executor=KilledAfter())
"""


def test_a_killed_run_resumes_where_it_stopped_bit_for_bit(tmp_path):
    X0, configs, mask_set = grid()
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    expected = chunks.sweep(X0, configs, mask_set, **GRID, folder=whole, progress=False)
    script = KILLED.format(tests=os.path.dirname(__file__), keep=5, folder=str(resumed))
    killed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert len(chunk_bytes(resumed)) == 5
    (resumed / ".chunk-00007.npy.x1y2z3.partial").write_bytes(
        b"half a chunk"
    )  # what a kill during a write leaves
    counting = Counting()
    got = chunks.sweep(
        X0, configs, mask_set, **GRID, folder=resumed, executor=counting, progress=False
    )
    assert counting.jobs == len(chunk_bytes(whole)) - 5
    assert chunk_bytes(resumed) == chunk_bytes(whole)
    assert not list(resumed.glob(".*.partial"))
    pd.testing.assert_frame_equal(got, expected, check_exact=True)


def test_a_folder_holding_another_sweep_is_refused(tmp_path):
    X0, configs, mask_set = grid()
    chunks.sweep(X0, configs, mask_set, **GRID, folder=tmp_path)
    with pytest.raises(ParameterError, match="holds a different sweep"):
        chunks.sweep(X0 * 2, configs, mask_set, **GRID, folder=tmp_path)
    with pytest.raises(ParameterError, match="holds a different sweep"):
        chunks.sweep(X0, configs, mask_set, **{**GRID, "batch_size": 3}, folder=tmp_path)


def test_a_chunk_of_the_wrong_shape_is_computed_again(tmp_path):
    X0, configs, mask_set = grid()
    expected = chunks.sweep(X0, configs, mask_set, **GRID, folder=tmp_path)
    (tmp_path / "chunk-00002.npy").write_bytes(b"not an array")
    counting = Counting()
    pd.testing.assert_frame_equal(
        chunks.sweep(X0, configs, mask_set, **GRID, folder=tmp_path, executor=counting),
        expected,
        check_exact=True,
    )
    assert counting.jobs == 1


def test_the_environment_names_a_folder_and_progress_prints_an_eta(tmp_path, monkeypatch, capsys):
    X0, configs, mask_set = grid()
    monkeypatch.setenv(chunks.ENV_FOLDER, str(tmp_path))
    chunks.sweep(X0, configs, mask_set, **GRID)
    (folder,) = tmp_path.iterdir()
    key = chunks.digest(sweep.plan(X0, configs, mask_set, **GRID), GRID["batch_size"])
    assert folder.name == f"sweep-{key[:16]}"
    err = capsys.readouterr().err
    assert "12 chunks, 0 done, 12 to run" in err and "ETA" in err and "FLOP/s" in err
    chunks.sweep(X0, configs, mask_set, **GRID)
    assert "ETA" not in capsys.readouterr().err  # nothing left to run


def test_without_a_folder_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(chunks.ENV_FOLDER, raising=False)
    X0, configs, mask_set = grid()
    pd.testing.assert_frame_equal(
        chunks.sweep(X0, configs, mask_set, **GRID),
        sweep.sweep(X0, configs, mask_set, **GRID),
        check_exact=True,
    )
    assert not list(tmp_path.iterdir())
