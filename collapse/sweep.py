"""Grids of SAN configurations -> one tidy pandas DataFrame of per-layer metrics.

Runs are *paired*: every (config, mask, d_qk) sees the same inputs and, for one seed,
the same attention weights, so differences between curves come from what the labels
name and nothing else. The grid is also cheap to run:

- masks and temperatures go along leading tensor dims of one batch (one big matmul
  instead of M x T small ones); a mask may be a list cycled over layers (as in
  `san.simulate`), the grid then holds each layer's masks for the lcm of the periods;
- configurations that share their weights (same sizes, init, bias, W_O, FFN width;
  they may differ in variant and LayerNorm) advance in lockstep through one draw of
  each layer's weights, so at BERT size the weights are drawn once per layer and
  seed, not once per (config, mask, d_qk);
- `batch_size` splits the samples into chunks to bound memory.

Results are bit-for-bit those of `san.simulate` called on each cell of the grid
(up to BLAS blocking, which tests hold to 1e-10 relative).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from . import metrics as _metrics
from . import rng
from .attention import temperature_scale
from .book.progress import bar as progress_bar
from .checks import ParameterError, check_float, check_int
from .masks import as_sequence
from .san import SANConfig, apply_layer, init_layers

__all__ = ["GRID", "sweep", "plan", "run_job", "job_frames", "Job", "Grid"]

GRID = ["config", "mask", "d_qk"]  # the columns that name a curve of a sweep's frame


def _check_grid(X0, configs, masks, d_qk):
    if not configs or not masks:
        raise ParameterError("configs and masks must each name at least one entry")
    if not isinstance(X0, torch.Tensor) or X0.ndim not in (2, 3) or not X0.is_floating_point():
        raise ParameterError(
            "X0 must be a floating-point tensor (samples, n, d) or (n, d), got "
            f"{tuple(getattr(X0, 'shape', ()))}"
        )
    n, d = X0.shape[-2:]
    for label, config in configs.items():
        if not isinstance(config, SANConfig) or config.d != d:
            raise ParameterError(f"config {label!r} must be a SANConfig with d={d} to match X0")
    sequences = {name: as_sequence(mask) for name, mask in masks.items()}
    for name, sequence in sequences.items():
        if sequence[0].shape != (n, n):
            raise ParameterError(
                f"mask {name!r} must have shape ({n}, {n}) to match X0's tokens, got "
                f"{tuple(sequence[0].shape)}"
            )
    d_qk = list(d_qk)
    if not d_qk:
        raise ParameterError("d_qk must list at least one value (None means the head width)")
    for value in d_qk:
        if value is not None:
            check_float("d_qk", value, positive=True)
    return d_qk, sequences


def _weight_key(config: SANConfig) -> tuple:
    """What decides a config's weights: configs with equal keys share them (variant and LN do not
    matter)."""
    return (
        config.d,
        config.n_heads,
        config.init,
        config.out_proj,
        config.bias,
        config.ffn_width,
        config.qk_gain,
        config.n_layers,
    )


def _groups(configs: Mapping[str, SANConfig]) -> list[dict[str, SANConfig]]:
    groups: dict[tuple, dict[str, SANConfig]] = {}
    for label, config in configs.items():
        groups.setdefault(_weight_key(config), {})[label] = config
    return list(groups.values())


@dataclass(frozen=True)
class Job:
    """One unit of a sweep: a weight-sharing group of configs, one network seed, samples
    start..stop-1.

    Why: jobs are independent and deterministic, so they can run in any order, in
    another process or on another machine (collapse.chunks, collapse.book.executors) and
    still give the bits one loop would.
    """

    seed: int
    group: dict[str, SANConfig]
    start: int
    stop: int
    d_qk: tuple[float, ...]  # the values used: None already replaced by the head width


@dataclass(frozen=True)
class Grid:
    """A checked sweep: inputs (S, n, d), stacked masks (P, M, 1, 1, n, n) (layer l uses
    mask[l % P], P the lcm of the masks' periods), metric names and the jobs in output order."""

    X0: torch.Tensor
    mask: torch.Tensor
    mask_names: tuple[str, ...]
    names: tuple[str, ...]
    jobs: tuple[Job, ...]


def plan(X0, configs, masks, *, d_qk=(None,), metrics=("mu",), seed=0, batch_size=None) -> Grid:
    """Check a sweep's arguments (as `sweep`) and split it into jobs: seed-major, then group, then
    sample batch."""
    d_qk, sequences = _check_grid(X0, configs, masks, d_qk)
    names = tuple(_metrics.check_metric_names(metrics))
    X0 = X0 if X0.ndim == 3 else X0[None]
    n_samples = X0.shape[0]
    chunk = n_samples if batch_size is None else check_int("batch_size", batch_size, minimum=1)
    period = math.lcm(*(len(sequence) for sequence in sequences.values()))
    mask = torch.stack(
        [
            torch.stack([seq[layer % len(seq)] for seq in sequences.values()])
            for layer in range(period)
        ]
    ).to(X0.device)[:, :, None, None]
    jobs = []
    for s in rng.check_seeds(seed):
        for group in _groups(configs):
            head = next(iter(group.values())).head_dim
            used = tuple(float(head) if v is None else float(v) for v in d_qk)
            jobs += [
                Job(s, group, i, min(i + chunk, n_samples), used)
                for i in range(0, n_samples, chunk)
            ]
    return Grid(X0, mask, tuple(masks), names, tuple(jobs))


@torch.inference_mode()
def run_job(
    X: torch.Tensor, job: Job, mask: torch.Tensor, names, progress: bool = False
) -> dict[str, dict[str, torch.Tensor]]:
    """Run every config of the job's group on its samples X (S, n, d) x masks (M) x temperatures
    (T); mask is the grid's (P, M, 1, 1, n, n), layer l using mask[l % P].

    Returns {label: {metric: float64 CPU tensor (L+1, M, T, S)}}.
    """
    M, T = mask.shape[1], len(job.d_qk)
    d_qk = torch.tensor(job.d_qk, dtype=torch.float64)[None, :, None]
    X = X.expand(M, T, *X.shape)
    scale = temperature_scale(d_qk, X, 3)
    start = {name: value.cpu() for name, value in _metrics.evaluate(X, names).items()}
    history = {label: {name: [value] for name, value in start.items()} for label in job.group}
    states = dict.fromkeys(job.group, X)
    drawer = next(
        (c for c in job.group.values() if c.variant == "full"), next(iter(job.group.values()))
    )
    layers = init_layers(drawer, job.seed, dtype=X.dtype, device=X.device)
    bar = progress_bar(layers, shown=progress, total=drawer.n_layers, desc="layers", leave=False)
    workspace = {}  # one projection buffer for every layer and config (san.self_attention)
    for layer, w in enumerate(bar):
        layer_mask = mask[layer % len(mask)]
        for label, config in job.group.items():
            states[label], _ = apply_layer(
                states[label], w, config, layer_mask, scale, weights=False, workspace=workspace
            )
            for name, value in _metrics.evaluate(states[label], names).items():
                history[label][name].append(value.cpu())
    return {
        label: {name: torch.stack(values) for name, values in metric.items()}
        for label, metric in history.items()
    }


def _tidy(result, labels: dict, offset: int) -> pd.DataFrame:
    """(L+1, M, T, S) metric tensors -> long rows; labels: column -> values along M or T."""
    first = next(iter(result.values()))
    L1, M, T, S = first.shape
    layer, m, t, s = np.meshgrid(
        np.arange(L1), np.arange(M), np.arange(T), np.arange(S), indexing="ij"
    )
    frame = pd.DataFrame(
        {
            "config": labels["config"],
            "mask": np.asarray(labels["mask"], dtype=object)[m.ravel()],
            "d_qk": np.asarray(labels["d_qk"], dtype=float)[t.ravel()],
            "seed": labels["seed"],
            "sample": s.ravel() + offset,
            "layer": layer.ravel(),
        }
    )
    for name, value in result.items():
        frame[name] = value.numpy().ravel()
    return frame


def job_frames(
    grid: Grid, job: Job, result: dict[str, dict[str, torch.Tensor]]
) -> list[pd.DataFrame]:
    """A job's result as tidy rows, one frame per config label (the order `sweep` concatenates them
    in)."""
    labels = {"mask": list(grid.mask_names), "d_qk": list(job.d_qk), "seed": job.seed}
    return [
        _tidy(values, {**labels, "config": label}, job.start) for label, values in result.items()
    ]


def sweep(
    X0: torch.Tensor,
    configs: Mapping[str, SANConfig],
    masks: Mapping[str, torch.Tensor],
    *,
    d_qk: Sequence[float | None] = (None,),
    metrics: Sequence[str] = ("mu",),
    seed: int | Sequence[int] = 0,
    batch_size: int | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Simulate every (config, mask, d_qk) on the same inputs X0 (samples, n, d) and weights.

    masks: name -> an (n, n) mask, or a list of them cycled over layers (see san.simulate).
    Returns one row per (config, mask, d_qk, seed, sample, layer) with one column per
    metric. d_qk None means the head width, and the column holds the value actually
    used. A sequence of seeds runs every sample under every seed's network. The runs
    happen in X0's dtype and on X0's device; metrics are float64 on the CPU.
    `collapse.chunks.sweep` runs the same jobs resumably, on an executor.
    """
    grid = plan(X0, configs, masks, d_qk=d_qk, metrics=metrics, seed=seed, batch_size=batch_size)
    frames = []
    for job in progress_bar(grid.jobs, shown=progress, desc="sweep"):
        frames += job_frames(
            grid, job, run_job(grid.X0[job.start : job.stop], job, grid.mask, grid.names, progress)
        )
    return pd.concat(frames, ignore_index=True)
