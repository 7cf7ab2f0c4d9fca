"""Resumable sweeps: every job of a sweep is a chunk, written atomically to a folder.

Why: the paper profile runs for hours on a CPU and may be stopped (Ctrl-C, kill, a
lost machine). Each job of `sweep.plan` (a weight-sharing group of configs, one
network seed, one batch of samples) is deterministic and independent of the others,
so its metrics are stored on their own and a rerun computes only the missing ones:
an interrupted-then-resumed sweep gives the bits an uninterrupted one gives.

A chunk folder holds

    manifest.json     the sweep's digest (collapse.provenance): inputs, configs, masks,
                      d_qk, metrics, seeds, batch size, device, the science modules it
                      runs and the versions of the numeric packages
    chunk-00000.npy   job 0's metrics, float64 (configs, metrics, layers + 1, masks, d_qk, samples)

A chunk file only ever appears whole (written under a temporary name, flushed,
renamed); a folder holding another sweep's digest is refused, never mixed. One run
at a time per folder.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from . import provenance
from . import sweep as _sweep
from .atomic import atomic_path, write_atomic
from .book.executors import LocalExecutor
from .book.progress import bar as progress_bar
from .checks import ParameterError
from .cost import grid_flops
from .san import SANConfig

__all__ = ["sweep", "digest", "ENV_FOLDER"]

# A folder for the chunk folders of sweeps that name none (set for the paper profile).
ENV_FOLDER = "COLLAPSE_CHUNKS"
_CALIBRATION_SAMPLES = 4


def digest(grid: _sweep.Grid, batch_size: int | None) -> str:
    """The provenance digest of a sweep: a changed input, grid, science module or numeric
    package starts a new sweep; an edit of the book tooling does not."""
    X0 = grid.X0.detach().cpu().contiguous()
    payload = [
        f"{X0.dtype} {tuple(X0.shape)} {grid.X0.device.type} batch {batch_size}\n".encode(),
        X0.view(torch.uint8).numpy().tobytes() if X0.numel() else b"",
        grid.mask.cpu().contiguous().numpy().view(np.uint8).tobytes(),
        repr((grid.mask_names, tuple(grid.mask.shape), grid.names)).encode(),
        *(
            repr((j.seed, j.start, j.stop, j.d_qk, list(j.group.items()))).encode()
            for j in grid.jobs
        ),
    ]
    return provenance.digest("chunks", b"\n".join(payload), ["chunks"])


def _open_folder(folder: Path, key: str, n_jobs: int) -> None:
    """Create the folder and its manifest, or check that it holds this sweep; remove temporary
    files of a killed run."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / "manifest.json"
    if manifest.is_file():
        try:
            held = json.loads(manifest.read_text()).get("digest")
        except (OSError, json.JSONDecodeError):
            held = None
        if held != key:
            raise ParameterError(
                f"chunk folder {folder} holds a different sweep (inputs, grid or library "
                "changed): use another folder or delete it"
            )
    else:
        write_atomic(manifest, json.dumps({"digest": key, "jobs": n_jobs}, indent=1), sync=True)
    for stale in folder.glob(".*.partial"):
        stale.unlink(missing_ok=True)


def _compute(X, job: _sweep.Job, mask: torch.Tensor, names, device: str) -> np.ndarray:
    """One job's metrics as one float64 array (configs, metrics, L+1, M, T, S); runs wherever the
    executor puts it."""
    X, mask = torch.as_tensor(X).to(device), mask.to(device)
    result = _sweep.run_job(X, job, mask, names)
    return np.stack(
        [np.stack([result[label][name].numpy() for name in names]) for label in job.group]
    )


def _timed(X, job: _sweep.Job, mask: torch.Tensor, names, device: str) -> float:
    """Best of two runs of a job, in seconds (the first also warms up threads, allocator and
    imports)."""
    times = []
    for _ in range(2):
        start = time.perf_counter()
        _compute(X, job, mask, names, device)
        times.append(time.perf_counter() - start)
    return min(times)


def _job_flops(grid: _sweep.Grid, job: _sweep.Job) -> float:
    runs = (job.stop - job.start) * grid.mask.shape[1] * len(job.d_qk)
    return grid_flops(job.group, grid.X0.shape[-2], runs)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _calibrate(grid: _sweep.Grid, job: _sweep.Job, executor, args) -> float:
    """FLOP/s of one worker on a one-layer, few-sample copy of `job` (small batches run slower: the
    ETA errs long)."""
    small = replace(
        job,
        group={k: replace(c, n_layers=1) for k, c in job.group.items()},
        stop=min(job.stop, job.start + _CALIBRATION_SAMPLES),
    )
    X = grid.X0[small.start : small.stop]
    (_, seconds), *_ = executor.map(_timed, [args(X, small)])
    return _job_flops(grid, small) / max(seconds, 1e-9)


def _load(path: Path, shape: tuple) -> np.ndarray | None:
    """A chunk file's array, or None when it is missing or not this job's shape."""
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    return array if array.shape == shape and array.dtype == np.float64 else None


def sweep(
    X0: torch.Tensor,
    configs: Mapping[str, SANConfig],
    masks: Mapping[str, torch.Tensor],
    *,
    d_qk: Sequence[float | None] = (None,),
    metrics: Sequence[str] = ("mu",),
    seed: int | Sequence[int] = 0,
    batch_size: int | None = None,
    folder: str | os.PathLike | None = None,
    executor=None,
    progress: bool | None = None,
) -> pd.DataFrame:
    """`collapse.sweep.sweep`, job by job on `executor`, each job's result kept in `folder` and
    reused.

    Returns the same DataFrame as `sweep.sweep` with the same arguments. folder None
    uses $COLLAPSE_CHUNKS/sweep-<digest> when that variable is set, else keeps nothing.
    executor: a `collapse.book.executors` executor (default: this process). progress (default:
    on when a folder is used) prints the work left and an ETA from a short calibration
    before starting, then a progress bar with the FLOP rate and ETA.
    """
    grid = _sweep.plan(
        X0, configs, masks, d_qk=d_qk, metrics=metrics, seed=seed, batch_size=batch_size
    )
    executor = executor or LocalExecutor()
    key = digest(grid, batch_size) if folder is not None or os.environ.get(ENV_FOLDER) else None
    if folder is None and key is not None:
        folder = Path(os.environ[ENV_FOLDER]) / f"sweep-{key[:16]}"
    folder = None if folder is None else Path(folder)
    progress = folder is not None if progress is None else progress
    if folder is not None:
        _open_folder(folder, key, len(grid.jobs))
    device = grid.X0.device.type

    def args(X, job):
        return (
            X.cpu().clone() if executor.remote else X,
            job,
            grid.mask.cpu() if executor.remote else grid.mask,
            grid.names,
            device,
        )

    def shape(job):
        M, S = grid.mask.shape[1], job.stop - job.start
        return (
            len(job.group),
            len(grid.names),
            next(iter(job.group.values())).n_layers + 1,
            M,
            len(job.d_qk),
            S,
        )

    paths = [
        None if folder is None else folder / f"chunk-{i:05d}.npy" for i in range(len(grid.jobs))
    ]
    arrays = [
        None if path is None else _load(path, shape(job))
        for path, job in zip(paths, grid.jobs, strict=True)
    ]
    pending = [i for i, array in enumerate(arrays) if array is None]
    total = sum(_job_flops(grid, grid.jobs[i]) for i in pending)
    if progress and pending:
        rate = _calibrate(grid, grid.jobs[pending[0]], executor, args)
        print(
            f"sweep: {len(grid.jobs)} chunks, {len(grid.jobs) - len(pending)} done, "
            f"{len(pending)} to run ({total / 1e12:.3g} TFLOP); "
            f"calibrated {rate / 1e9:.3g} GFLOP/s per worker x {executor.workers}: ETA "
            f"{_duration(total / (rate * executor.workers))}"
            + (f"; chunks in {folder}" if folder else ""),
            file=sys.stderr,
            flush=True,
        )
    with progress_bar(
        total=total, unit="FLOP", unit_scale=True, desc="sweep", shown=progress and bool(pending)
    ) as bar:
        items = (
            args(grid.X0[grid.jobs[i].start : grid.jobs[i].stop], grid.jobs[i]) for i in pending
        )  # lazily: no copy of X0
        for k, array in executor.map(_compute, items):
            i = pending[k]
            if paths[i] is not None:
                with atomic_path(paths[i]) as partial, open(partial, "wb") as stream:
                    np.save(stream, array, allow_pickle=False)
                    stream.flush()
                    os.fsync(stream.fileno())
            arrays[i] = array
            bar.update(_job_flops(grid, grid.jobs[i]))
    frames = []
    for job, array in zip(grid.jobs, arrays, strict=True):
        result = {
            label: {name: torch.from_numpy(array[c, m]) for m, name in enumerate(grid.names)}
            for c, label in enumerate(job.group)
        }
        frames += _sweep.job_frames(grid, job, result)
    return pd.concat(frames, ignore_index=True)
