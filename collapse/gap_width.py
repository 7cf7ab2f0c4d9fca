"""Sweeps of the Mind-the-Gap stacks over the width: every variant at every (gamma, T) cell
with d = int(T / gamma), as the official code's README grid and rebuttal Figs. X-XI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from . import rng
from .checks import ParameterError, check_choice, check_float, check_int
from .gap import ATTENTIONS, GapConfig, simulate_many
from .gap_shared import simulate_shared

__all__ = ["width_for", "fig7_variants", "width_sweep", "width_sweep_flops"]

def width_for(T: int, gamma: float) -> int:
    """Width d for T tokens at aspect ratio gamma = T/d, as the official code computes it:
    int(1/gamma * T)."""
    T = check_int("T", T, minimum=1)
    gamma = check_float("gamma", gamma, positive=True)
    if gamma > 1:
        raise ParameterError(
            f"gamma must be in (0, 1] (the official code requires d >= T), got {gamma}"
        )
    return int(1 / gamma * T)


def fig7_variants(attention: str = "markov", *, identity: bool = True) -> dict[str, dict]:
    """{A, A⊥} x {-, +LN, +skip, +skip+LN} (+ Identity A): the curves of rebuttal Fig. VII and the
    README sweep.

    Why: one place that names the nine configurations every MtG depth and width plot uses;
    values are GapConfig keyword arguments, keys the paper-style labels.
    """
    check_choice("attention", attention, ATTENTIONS)
    out = {}
    for fix in (False, True):
        for skip, layernorm in ((False, False), (False, True), (True, False), (True, True)):
            kw = {"attention": attention, "fix": fix, "skip": skip, "layernorm": layernorm}
            out[GapConfig(T=1, d=1, n_layers=0, **kw).label] = kw
    if identity:
        out["Identity A"] = {"attention": "identity"}
    return out


def _cells(T_values, gammas, max_width) -> list[tuple[float, int, int]]:
    T_values = [check_int("T", T, minimum=1) for T in T_values]
    gammas = [check_float("gamma", g, positive=True) for g in gammas]
    if not T_values or not gammas:
        raise ParameterError("T_values and gammas must each list at least one value")
    cells = [(g, T, width_for(T, g)) for g in gammas for T in T_values]
    return [c for c in cells if max_width is None or c[2] <= max_width]


def width_sweep(
    variants: Mapping[str, dict],
    T_values: Sequence[int],
    gammas: Sequence[float],
    *,
    n_layers: int,
    seeds: int | Sequence[int],
    metrics=("gram_stable_rank",),
    max_width: int | None = None,
    dtype=None,
    device=None,
    seed_batch: int | None = None,
    fast: bool = False,
) -> pd.DataFrame:
    """Every variant at every (gamma, T) with d = int(T/gamma): one row per (variant, gamma, T,
    layer, seed).

    Why: the README stable-rank sweep and rebuttal Figs. X-XI are this grid. Each cell is
    one `simulate_many` call, so variants of one attention kind are paired within a cell.
    Cells wider than max_width are left out (their cost grows like d^2 per layer).
    fast=True runs `simulate_shared` instead (Markov and identity softmax stacks, stable
    ranks only, float32 unless dtype says otherwise): other draws, the same model, a few
    times less time. dtype None is float64 for `simulate_many`.
    Columns: variant, gamma, T, d, layer, seed and one per metric.
    """
    if not variants:
        raise ParameterError("variants must name at least one configuration")
    seeds = rng.check_seeds(seeds)
    simulator = simulate_shared if fast else simulate_many
    if dtype is None:
        dtype = torch.float32 if fast else torch.float64
    frames = []
    for gamma, T, d in _cells(T_values, gammas, max_width):
        configs = [GapConfig(T=T, d=d, n_layers=n_layers, **kw) for kw in variants.values()]
        result = simulator(
            configs, seeds, metrics=metrics, dtype=dtype, device=device, seed_batch=seed_batch
        )
        C, L1, S = next(iter(result.values())).shape
        v, layer, s = np.meshgrid(np.arange(C), np.arange(L1), np.arange(S), indexing="ij")
        frame = pd.DataFrame(
            {
                "variant": np.asarray(list(variants), dtype=object)[v.ravel()],
                "gamma": gamma,
                "T": T,
                "d": d,
            }
        )
        frame = frame.assign(layer=layer.ravel(), seed=np.asarray(seeds)[s.ravel()])
        frames.append(frame.assign(**{n: r.numpy().ravel() for n, r in result.items()}))
    return pd.concat(frames, ignore_index=True)


def width_sweep_flops(
    variants: Mapping[str, dict],
    T_values,
    gammas,
    *,
    n_layers: int,
    n_seeds: int,
    max_width: int | None = None,
) -> float:
    """Useful FLOPs of `width_sweep` (2 x multiply-adds of A X, X W, the key-query products and the
    Gram metric).

    Why: the paper profile prints an ETA before it starts ; pair with cost.eta_seconds.
    """
    total = 0.0
    for _, T, d in _cells(T_values, gammas, max_width):
        for kw in variants.values():
            keyquery = kw.get("attention", "markov") in ("xavier", "normal")
            total += (
                2 * T * T * d
                + 2 * T * d * d * (3 if keyquery else 1)
                + 2 * T * T * d * (2 if keyquery else 1)
            )
    return (
        total
        * check_int("n_layers", n_layers, minimum=0)
        * check_int("n_seeds", n_seeds, minimum=1)
    )
