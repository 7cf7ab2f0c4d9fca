"""The maps read as implicit fixes of the spectral gap: their spectra against T, and where
differential attention's outlier leaves the bulk.

A T x T map M acts on the all-ones direction u = 1/sqrt(T) as M u. Its *outlier gain* is
||M u|| (1 for softmax, |1 - lam| for differential attention, 0 for A⊥ and centred
attention); its *bulk* is M with that direction removed on the right, M (I - u u^T); the
bulk's largest singular value is the *bulk edge*.

Differential attention with independent random Markov A1, A2 (our derivation, not the
papers'): M = (1 - lam) u u^T + B with B = A1⊥ - lam A2⊥ and B u = 0. B has i.i.d.-like
entries of variance (1 + lam^2) / T^2, so with s = sqrt(1 + lam^2) / sqrt(T) its eigenvalues
fill the disc of radius s and its singular values the quarter circle on [0, 2 s]. With
theta = |1 - lam| and T* = 4 (1 + lam^2) / (1 - lam)^2, three thresholds follow:

    T*/4   the eigenvalue 1 - lam leaves the disc of the bulk's eigenvalues;
    T*/2   sigma_1(M) leaves the bulk edge: M M^T = theta^2 u u^T + B B^T is a rank-one spike
           on a Marchenko-Pastur bulk, so sigma_1 = theta^2 / sqrt(theta^2 - s^2) once
           theta^2 > 2 s^2, and 2 s before;
    T*     the gain theta passes the bulk edge 2 s.

Key-query attention has a wider bulk (sqrt(T) sigma_1(A⊥) near 3, not 2): `edge_constant`
c replaces the 2 in every formula (s = c sqrt(1 + lam^2) / (2 sqrt(T))).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from . import gap, rng
from .attention_maps import LAMBDA_STD, differential_lambda, lambda_init
from .checks import ParameterError, check_float, check_int, check_matrix
from .markov import top_singular_values

__all__ = [
    "gain",
    "bulk",
    "spectrum",
    "crossover",
    "bulk_edge",
    "spike_top",
    "measured_crossover",
    "spectrum_sweep",
    "lambda_draws",
    "schedule",
]


def gain(M: torch.Tensor) -> torch.Tensor:
    """||M u|| with u = 1/sqrt(T): what the map does to the tokens' common direction."""
    check_matrix("M", M, square=True)
    return torch.linalg.vector_norm(M.sum(-1), dim=-1) / math.sqrt(M.shape[-1])


def bulk(M: torch.Tensor) -> torch.Tensor:
    """M (I - 11^T / T): the map with the common direction removed on the right (A⊥ for a
    row-stochastic A)."""
    check_matrix("M", M, square=True)
    return M - M.sum(-1, keepdim=True) / M.shape[-1]


def spectrum(M: torch.Tensor) -> dict[str, float]:
    """The top singular value, the outlier gain and the bulk edge of one map (floats)."""
    check_matrix("M", M, square=True)
    if M.ndim != 2:
        raise ParameterError(f"M must be one T x T matrix, got shape {tuple(M.shape)}")
    top = top_singular_values(M, 1)[0]
    edge = top_singular_values(bulk(M), 1)[0]
    return {"top": float(top), "gain": float(gain(M)), "edge": float(edge)}


def _lam(lam) -> np.ndarray:
    lam = np.asarray(lam, dtype=float)
    if np.any(lam == 1):
        raise ParameterError("lam must differ from 1 (lam = 1 has no outlier at any T)")
    return lam


def crossover(lam, edge_constant: float = 2.0):
    """T* = c^2 (1 + lam^2) / (1 - lam)^2: the T above which the gain |1 - lam| of A1 - lam A2
    exceeds the bulk edge c sqrt(1 + lam^2) / sqrt(T) (c = 2 for random Markov maps)."""
    lam, c = _lam(lam), check_float("edge_constant", edge_constant, positive=True)
    return c**2 * (1 + lam**2) / (1 - lam) ** 2


def bulk_edge(T, lam, edge_constant: float = 2.0):
    """Predicted bulk edge c sqrt(1 + lam^2) / sqrt(T) of A1 - lam A2 (independent A1, A2)."""
    c = check_float("edge_constant", edge_constant, positive=True)
    return c * np.sqrt(1 + np.asarray(lam, float) ** 2) / np.sqrt(np.asarray(T, float))


def spike_top(T, lam, edge_constant: float = 2.0):
    """Predicted sigma_1 of A1 - lam A2: theta^2 / sqrt(theta^2 - s^2) once theta^2 > 2 s^2
    (T > T*/2), else the bulk edge 2 s; theta = |1 - lam|, s = half the bulk edge."""
    theta = np.abs(1 - _lam(lam))
    s = bulk_edge(T, lam, edge_constant) / 2
    spiked = theta**2 / np.sqrt(np.clip(theta**2 - s**2, 1e-300, None))
    return np.where(theta**2 > 2 * s**2, spiked, 2 * s)


def measured_crossover(T_values, gains, edges) -> float:
    """The T at which gain / edge first rises through 1, interpolated linearly in (log T,
    log ratio) between the grid points around it; NaN when it does not cross on the grid.

    T_values increasing; gains and edges one value per T (e.g. medians over seeds)."""
    T = np.asarray(T_values, float)
    ratio = np.log(np.asarray(gains, float) / np.asarray(edges, float))
    if T.ndim != 1 or T.shape != ratio.shape or len(T) < 2 or np.any(np.diff(T) <= 0):
        raise ParameterError("T_values must increase, with one gain and one edge per T")
    for i in range(len(T) - 1):
        if ratio[i] < 0 <= ratio[i + 1]:
            x0, x1 = np.log(T[i]), np.log(T[i + 1])
            return float(np.exp(x0 + (x1 - x0) * -ratio[i] / (ratio[i + 1] - ratio[i])))
    return math.nan


def spectrum_sweep(
    variants: Mapping[str, dict],
    T_values: Sequence[int],
    seeds,
    *,
    attention: str = "markov",
    device=None,
) -> pd.DataFrame:
    """`spectrum` of the first-layer map of every variant (GapConfig keywords: map, lam, fix)
    at every T (d = T), one seed at a time; one row per (variant, T, seed).

    Why: the maps of one seed share one draw (`gap.first_maps`), so the variants are paired;
    at T = 4096 a map is 128 MB, so seeds run one after another.
    Columns: variant, attention, T, seed, top, gain, edge, ratio (= top / edge).
    """
    if not variants:
        raise ParameterError("variants must name at least one map")
    rows = []
    for T in T_values:
        T = check_int("T", T, minimum=2)
        configs = [
            gap.GapConfig(T=T, d=T, n_layers=1, attention=attention, **kw)
            for kw in variants.values()
        ]
        for seed in rng.check_seeds(seeds):
            maps = gap.first_maps(configs, seed, device=device)
            for label, M in zip(variants, maps, strict=True):
                rows.append(
                    {"variant": label, "attention": attention, "T": T, "seed": seed}
                    | spectrum(M.to("cpu", torch.float64))
                )
    frame = pd.DataFrame(rows)
    return frame.assign(ratio=frame["top"] / frame["edge"])


def lambda_draws(layer: int, n_heads: int, *, lam_dim: int = 64, seed: int = 0) -> torch.Tensor:
    """lam of `n_heads` heads of layer `layer` at the Differential Transformer's initialisation:
    lam_init(layer) + exp(q1 . k1) - exp(q2 . k2), the four vectors N(0, 0.1^2) of width
    `lam_dim` (64 in the reference code's example: width 1024, 8 heads)."""
    layer, n_heads = check_int("layer", layer, minimum=1), check_int("n_heads", n_heads, minimum=1)
    lam_dim = check_int("lam_dim", lam_dim, minimum=1)
    g = rng.generator(check_int("seed", seed, minimum=0), layer)
    q1, k1, q2, k2 = (
        torch.randn(4, n_heads, lam_dim, generator=g, dtype=torch.float64) * LAMBDA_STD
    )
    return differential_lambda(q1, k1, q2, k2, lambda_init(layer))


def schedule(
    layers: Sequence[int],
    T_values: Sequence[int],
    *,
    n_heads: int = 1000,
    lam_dim: int = 64,
    edge_constant: float = 2.0,
    seed: int = 0,
) -> pd.DataFrame:
    """Per layer: lam_init, its T*, and over `n_heads` heads drawn at initialisation
    (`lambda_draws`) the spread of lam and the share of heads whose outlier stands above the
    bulk (T > T*) at each T of `T_values` (columns "above at T=<T>")."""
    rows = []
    for layer in layers:
        lam = lambda_draws(layer, n_heads, lam_dim=lam_dim, seed=seed).numpy()
        star = crossover(lam, edge_constant)
        row = {
            "layer": layer,
            "lam_init": lambda_init(layer),
            "T* (lam_init)": float(crossover(lambda_init(layer), edge_constant)),
            "lam std": float(lam.std()),
            "T* median": float(np.median(star)),
        }
        rows.append(row | {f"above at T={T}": float(np.mean(star < T)) for T in T_values})
    return pd.DataFrame(rows)
