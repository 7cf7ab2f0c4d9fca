"""Grids of SAN configurations -> one tidy pandas DataFrame of per-layer metrics.

Runs are *paired*: every (config, mask, d_qk) sees the same inputs and, for one seed,
the same attention weights, so differences between curves come from what the labels
name and nothing else. The grid is also cheap to run:

- masks and temperatures go along leading tensor dims of one batch (one big matmul
  instead of M x T small ones);
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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from . import fit
from . import metrics as _metrics
from .attention import centered_layernorm, temperature_scale
from .checks import ParameterError, check_choice, check_float, check_int
from .masks import check_mask
from .san import SANConfig, apply_layer, init_layers

__all__ = [
    "embedding_inputs",
    "sweep",
    "plan",
    "run_job",
    "job_frames",
    "Job",
    "Grid",
    "curves",
    "log_stats",
    "rates",
    "at_layer",
    "summary",
    "grid_flops",
    "eta_seconds",
    "pick_device",
    "DEVICES",
]

GRID = ["config", "mask", "d_qk"]
DEVICES = ("cpu", "cuda", "auto")


def pick_device(name: str = "auto") -> torch.device:
    """The device a notebook's `device` parameter names: "auto" is cuda when torch sees a GPU, else cpu.

    Why: the paper profile should use a GPU wherever there is one without a per-machine
    setting, while asking for "cuda" where there is none must stop with one line, not
    quietly run for hours on the CPU.
    """
    check_choice("device", name, DEVICES)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ParameterError("device cuda: torch sees no CUDA GPU here; use device=auto or device=cpu")
    return torch.device(name)


def embedding_inputs(
    n_samples: int,
    n_tokens: int,
    d: int,
    *,
    seed: int = 0,
    std: float = 0.02,
    eps: float = 1e-12,
    shared: bool = True,
    dtype=torch.float64,
    device=None,
) -> torch.Tensor:
    """BERT's embedding output at random init, (n_samples, n_tokens, d): LN(word + position + type).

    Why: Wu et al. feed the SANs BERT's embedding output (PAPERS.md D3). At random init
    the three tables are N(0, std^2) (D1); the position table and the one token-type row
    are shared by every sample, and each token gets its own word row (with a 30k
    vocabulary repeats are rare). The shared rows give the tokens a common component,
    as in BERT; the LayerNorm is centred with gain 1, bias 0 and BERT's eps.
    shared=False draws the position and type rows afresh for every token, which makes
    all rows independent (LayerNorm of i.i.d. Gaussian rows, PAPERS.md's pre-check):
    the comparison shows how much the shared component matters.
    """
    n_samples = check_int("n_samples", n_samples, minimum=1)
    n_tokens = check_int("n_tokens", n_tokens, minimum=1)
    d = check_int("d", d, minimum=1)
    std = check_float("std", std, positive=True)
    g = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    rows = (n_samples, n_tokens) if not shared else ()
    position = torch.randn(*(rows or (n_tokens,)), d, generator=g, dtype=torch.float64)
    token_type = torch.randn(*rows, d, generator=g, dtype=torch.float64)
    words = torch.randn(n_samples, n_tokens, d, generator=g, dtype=torch.float64)
    X = centered_layernorm(std * (words + position + token_type), eps)
    return X.to(dtype=dtype, device=device)


def _seeds(seed) -> list[int]:
    seeds = list(seed) if isinstance(seed, Sequence) and not isinstance(seed, str) else [seed]
    if not seeds:
        raise ParameterError("seed must be an int >= 0 or a non-empty sequence of them, got an empty sequence")
    return [check_int("seed", s, minimum=0) for s in seeds]


def _check_grid(X0, configs, masks, d_qk):
    if not configs or not masks:
        raise ParameterError("configs and masks must each name at least one entry")
    if not isinstance(X0, torch.Tensor) or X0.ndim not in (2, 3) or not X0.is_floating_point():
        raise ParameterError(f"X0 must be a floating-point tensor (samples, n, d) or (n, d), got {tuple(getattr(X0, 'shape', ()))}")
    n, d = X0.shape[-2:]
    for label, config in configs.items():
        if not isinstance(config, SANConfig) or config.d != d:
            raise ParameterError(f"config {label!r} must be a SANConfig with d={d} to match X0")
    for name, mask in masks.items():
        check_mask(mask)
        if mask.shape != (n, n):
            raise ParameterError(f"mask {name!r} must have shape ({n}, {n}) to match X0's tokens, got {tuple(mask.shape)}")
    d_qk = list(d_qk)
    if not d_qk:
        raise ParameterError("d_qk must list at least one value (None means the head width)")
    for value in d_qk:
        if value is not None:
            check_float("d_qk", value, positive=True)
    return d_qk


def _weight_key(config: SANConfig) -> tuple:
    """What decides a config's weights: configs with equal keys share them (variant and LN do not matter)."""
    return (config.d, config.n_heads, config.init, config.out_proj, config.bias, config.ffn_width, config.qk_gain, config.n_layers)


def _groups(configs: Mapping[str, SANConfig]) -> list[dict[str, SANConfig]]:
    groups: dict[tuple, dict[str, SANConfig]] = {}
    for label, config in configs.items():
        groups.setdefault(_weight_key(config), {})[label] = config
    return list(groups.values())


@dataclass(frozen=True)
class Job:
    """One unit of a sweep: a weight-sharing group of configs, one network seed, samples start..stop-1.

    Why: jobs are independent and deterministic, so they can run in any order, in
    another process or on another machine (collapse.chunks, collapse.executors) and
    still give the bits one loop would.
    """

    seed: int
    group: dict[str, SANConfig]
    start: int
    stop: int
    d_qk: tuple[float, ...]  # the values used: None already replaced by the head width


@dataclass(frozen=True)
class Grid:
    """A checked sweep: inputs (S, n, d), stacked masks (M, 1, 1, n, n), metric names and the jobs in output order."""

    X0: torch.Tensor
    mask: torch.Tensor
    mask_names: tuple[str, ...]
    names: tuple[str, ...]
    jobs: tuple[Job, ...]


def plan(X0, configs, masks, *, d_qk=(None,), metrics=("mu",), seed=0, batch_size=None) -> Grid:
    """Check a sweep's arguments (as `sweep`) and split it into jobs: seed-major, then group, then sample batch."""
    d_qk = _check_grid(X0, configs, masks, d_qk)
    names = tuple(_metrics.check_metric_names(metrics))
    X0 = X0 if X0.ndim == 3 else X0[None]
    n_samples = X0.shape[0]
    chunk = n_samples if batch_size is None else check_int("batch_size", batch_size, minimum=1)
    mask = torch.stack(list(masks.values())).to(X0.device)[:, None, None]
    jobs = []
    for s in _seeds(seed):
        for group in _groups(configs):
            head = next(iter(group.values())).head_dim
            used = tuple(float(head) if v is None else float(v) for v in d_qk)
            jobs += [Job(s, group, i, min(i + chunk, n_samples), used) for i in range(0, n_samples, chunk)]
    return Grid(X0, mask, tuple(masks), names, tuple(jobs))


@torch.inference_mode()
def run_job(X: torch.Tensor, job: Job, mask: torch.Tensor, names, progress: bool = False) -> dict[str, dict[str, torch.Tensor]]:
    """Run every config of the job's group on its samples X (S, n, d) x masks (M) x temperatures (T).

    Returns {label: {metric: float64 CPU tensor (L+1, M, T, S)}}.
    """
    M, T = mask.shape[0], len(job.d_qk)
    d_qk = torch.tensor(job.d_qk, dtype=torch.float64)[None, :, None]
    X = X.expand(M, T, *X.shape)
    scale = temperature_scale(d_qk, X, 3)
    start = {name: value.cpu() for name, value in _metrics.evaluate(X, names).items()}
    history = {label: {name: [value] for name, value in start.items()} for label in job.group}
    states = dict.fromkeys(job.group, X)
    drawer = next((c for c in job.group.values() if c.variant == "full"), next(iter(job.group.values())))
    layers = init_layers(drawer, job.seed, dtype=X.dtype, device=X.device)
    for w in tqdm(layers, total=drawer.n_layers, desc="layers", disable=not progress, leave=False):
        for label, config in job.group.items():
            states[label], _ = apply_layer(states[label], w, config, mask, scale)
            for name, value in _metrics.evaluate(states[label], names).items():
                history[label][name].append(value.cpu())
    return {label: {name: torch.stack(values) for name, values in metric.items()} for label, metric in history.items()}


def _tidy(result, labels: dict, offset: int) -> pd.DataFrame:
    """(L+1, M, T, S) metric tensors -> long rows; labels: column -> values along M or T."""
    first = next(iter(result.values()))
    L1, M, T, S = first.shape
    layer, m, t, s = np.meshgrid(np.arange(L1), np.arange(M), np.arange(T), np.arange(S), indexing="ij")
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


def job_frames(grid: Grid, job: Job, result: dict[str, dict[str, torch.Tensor]]) -> list[pd.DataFrame]:
    """A job's result as tidy rows, one frame per config label (the order `sweep` concatenates them in)."""
    labels = {"mask": list(grid.mask_names), "d_qk": list(job.d_qk), "seed": job.seed}
    return [_tidy(values, {**labels, "config": label}, job.start) for label, values in result.items()]


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

    Returns one row per (config, mask, d_qk, seed, sample, layer) with one column per
    metric. d_qk None means the head width, and the column holds the value actually
    used. A sequence of seeds runs every sample under every seed's network. The runs
    happen in X0's dtype and on X0's device; metrics are float64 on the CPU.
    `collapse.chunks.sweep` runs the same jobs resumably, on an executor.
    """
    grid = plan(X0, configs, masks, d_qk=d_qk, metrics=metrics, seed=seed, batch_size=batch_size)
    frames = []
    for job in tqdm(grid.jobs, desc="sweep", disable=not progress):
        frames += job_frames(grid, job, run_job(grid.X0[job.start : job.stop], job, grid.mask, grid.names, progress))
    return pd.concat(frames, ignore_index=True)


def _select(frame: pd.DataFrame, select: dict) -> pd.DataFrame:
    for column, value in select.items():
        if column not in frame:
            raise ParameterError(f"no column {column!r}; columns are {', '.join(frame.columns)}")
        frame = frame[np.isclose(frame[column], value)] if column == "d_qk" else frame[frame[column] == value]
    if frame.empty:
        raise ParameterError(f"no rows match {select}")
    return frame


def curves(frame: pd.DataFrame, metric: str = "mu", **select) -> np.ndarray:
    """Metric values as an array (layers, runs) for the selected rows (e.g. config=..., mask=...).

    Why: the plotting band and fit.log_slope take (layers x runs) arrays; runs are
    (seed, sample) pairs and every selected grid cell must be fully run.
    """
    rows = _select(frame, select)
    table = rows.pivot_table(index="layer", columns=[c for c in [*GRID, "seed", "sample"] if c in rows], values=metric, aggfunc="first")
    return table.to_numpy(dtype=float)


def log_stats(frame: pd.DataFrame, metric: str = "mu", floor: float = 1e-300) -> pd.DataFrame:
    """Mean and std over runs of log(metric), per (config, mask, d_qk, layer).

    Why: the papers plot mu on log axes and our verdicts compare log mu; values below
    `floor` (exact zeros once tokens coincide bit for bit) are clipped to it so that
    log stays finite.
    """
    logged = frame.assign(log=np.log(np.maximum(frame[metric].to_numpy(dtype=float), floor)))
    stats = logged.groupby([*GRID, "layer"])["log"].agg(["mean", "std", "count"])
    return stats.reset_index()


def at_layer(frame: pd.DataFrame, layer: int, metric: str = "mu") -> pd.DataFrame:
    """Mean log(metric) at one layer as a table: rows (config, mask), columns d_qk.

    Why: the verdicts read log mu at a given depth across temperatures and masks.
    """
    stats = log_stats(frame, metric)
    return stats[stats["layer"] == check_int("layer", layer, minimum=0)].pivot_table(index=["config", "mask"], columns="d_qk", values="mean")


def rates(frame: pd.DataFrame, metric: str = "mu", *, start: int = 0, stop: int | None = None, floor: float = 1e-10) -> pd.DataFrame:
    """Least-squares slope of log(metric) against the layer, per (config, mask, d_qk): mean and std over runs.

    Why: PAPERS.md's rate checks fit only layers start..stop-1 where mu/mu(0) > floor
    (float64 floors log mu near -35). A run with fewer than two such layers gives NaN.
    """
    out = []
    for key, rows in frame.groupby(GRID, sort=False):
        values = curves(rows, metric)
        slope = fit.log_slope(values, floor=floor, start=start, stop=stop)
        finite = slope[np.isfinite(slope)]
        mean, std = (finite.mean(), finite.std()) if finite.size else (math.nan, math.nan)
        out.append({**dict(zip(GRID, key, strict=True)), "slope": mean, "std": std, "runs": finite.size})
    return pd.DataFrame(out)


def summary(frame: pd.DataFrame, metric: str = "mu", *, start: int = 0, stop: int | None = None, floor: float = 1e-10) -> pd.DataFrame:
    """Per (config, mask, d_qk): mean log(metric) at the first and last layer, their difference and the fitted slope.

    Why: every verdict on a sweep reads these numbers (a net fall, a slope, an ordering
    at the last layer); one table keeps the notebooks short. Columns first, last,
    delta (= last - first) and slope (as in `rates`).
    """
    stats = log_stats(frame, metric)
    pick = lambda layer: stats[stats["layer"] == layer].set_index(GRID)["mean"]  # noqa: E731
    table = pd.DataFrame({"first": pick(stats["layer"].min()), "last": pick(stats["layer"].max())})
    table["delta"] = table["last"] - table["first"]
    table["slope"] = rates(frame, metric, start=start, stop=stop, floor=floor).set_index(GRID)["slope"]
    return table


def grid_flops(configs: Mapping[str, SANConfig], n_tokens: int, n_runs: int) -> float:
    """Useful FLOPs of a sweep: each config run on n_runs sequences (samples x masks x d_qk x seeds).

    Why: DESIGN.md asks the paper profile to print an ETA before it starts. Counts
    2 x multiply-adds of the Q/K/V(/O) projections, scores, A V and, for "full", the FFN;
    softmax, LayerNorm and metrics are not counted.
    """
    n = check_int("n_tokens", n_tokens, minimum=1)
    total = 0.0
    for config in configs.values():
        d, f = config.d, config.ffn_width
        per_layer = 2 * n * d * d * (4 if config.out_proj else 3) + 4 * n * n * d
        if config.variant == "full":
            per_layer += 4 * n * d * f
        total += per_layer * config.n_layers
    return total * check_int("n_runs", n_runs, minimum=1)


def eta_seconds(flops: float, *, dtype=torch.float64, device=None, efficiency: float = 0.5) -> float:
    """Seconds `flops` should take here: flops / (efficiency x a plain matmul's measured rate).

    Why: an ETA measured on the machine that will run the sweep, not a guess; the
    efficiency (the SAN's share of the matmul rate, DESIGN.md's goal is >= 0.6) is a
    parameter because it varies with sizes and load. Takes about 0.1 s to measure.
    """
    efficiency = check_float("efficiency", efficiency, positive=True)
    g = torch.Generator().manual_seed(0)
    A = torch.randn(1024, 768, generator=g, dtype=dtype).to(device)
    B = torch.randn(768, 768, generator=g, dtype=dtype).to(device)
    A @ B  # warm-up
    repeats, start = 5, time.perf_counter()
    for _ in range(repeats):
        C = A @ B
    if C.is_cuda:
        torch.cuda.synchronize()
    rate = repeats * 2 * 1024 * 768 * 768 / (time.perf_counter() - start)
    return float(flops) / (efficiency * rate)
