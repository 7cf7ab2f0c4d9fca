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
    "median_interval",
    "crossover_summary",
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


def median_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """The median of `values` and its distribution-free confidence interval: the order
    statistics x_(k) <= median <= x_(n+1-k) with the largest k whose coverage 1 - 2 P(B < k),
    B ~ Binomial(n, 1/2), is at least `level`; [min, max] when no k reaches it (n < 6 at 95 %:
    [min, max] then covers 1 - 2^(1-n)). NaN values are dropped.

    Why: a bulk edge is heavy-tailed (chapter 11), so the chapter compares medians over
    seeds; this interval assumes nothing about their law."""
    level = check_float("level", level)
    if not 0 < level < 1:
        raise ParameterError(f"level must lie in (0, 1), got {level}")
    x = np.sort(np.asarray(values, dtype=float).ravel())
    x = x[~np.isnan(x)]
    n = len(x)
    if n == 0:
        raise ParameterError("values must hold at least one number")
    tails = np.cumsum([math.comb(n, i) for i in range(n + 1)])  # 2^n P(B <= i), exact ints

    def coverage(k: int) -> float:  # of [x_(k), x_(n+1-k)]: 1 - 2 P(B <= k - 1)
        return 1 - 2 * int(tails[k - 1]) / 2**n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return float(np.median(x)), float(x[k - 1]), float(x[n - k])


def crossover_summary(frame: pd.DataFrame, lam: float, *, edge_constant: float = 2.0, level=0.95):
    """What the crossover of A1 - lam A2 looks like in one map's spectra (`spectrum_sweep`
    rows of one variant and kind: T, seed, gain, edge, ratio), as medians over the seeds at
    each T with their `median_interval`s.

    Returns a dict: "T* predicted" (`crossover`); "T* measured", the crossing of the median
    gain and the median edge (`measured_crossover`), with "T* low" and "T* high", the
    crossings of the median gain with the lower and the upper ends of the edges' intervals
    (a larger edge crosses later); "below T*/4", the largest median top / edge at T <= T*/4,
    with "below low" and "below high", the largest lower and upper ends of those medians'
    intervals; "above 2T*", the smallest median top / edge at T >= 2 T*, with "above
    spread", the seed-to-seed standard deviation of the ratio at that T; and "n seeds", the
    fewest seeds of any T. A missing range or crossing gives NaN; an end of the interval that
    does not cross on the grid, 0 (low) or inf (high).
    """
    star = float(crossover(lam, edge_constant))
    stats = {}
    for T, group in frame.groupby("T"):
        edge, edge_low, edge_high = median_interval(group["edge"], level)
        ratio, ratio_low, ratio_high = median_interval(group["ratio"], level)
        stats[T] = {
            "gain": float(group["gain"].median()),
            "edge": edge,
            "edge low": edge_low,
            "edge high": edge_high,
            "ratio": ratio,
            "ratio low": ratio_low,
            "ratio high": ratio_high,
            "spread": float(group["ratio"].std()),
            "n": len(group),
        }
    table = pd.DataFrame(stats).T.sort_index()
    T = table.index.to_numpy(float)

    def crossing(edge):  # an end that does not cross on the grid lies beyond it
        found = measured_crossover(T, table["gain"], table[edge])
        if math.isnan(found) and not math.isnan(measured):
            return 0.0 if edge == "edge low" else math.inf
        return found

    measured = measured_crossover(T, table["gain"], table["edge"])

    below = table[table.index <= star / 4]
    above = table[table.index >= 2 * star]
    low_at = above["ratio"].idxmin() if len(above) else None
    return {
        "lam": float(lam),
        "T* predicted": star,
        "T* measured": measured,
        "T* low": crossing("edge low"),
        "T* high": crossing("edge high"),
        "below T*/4": float(below["ratio"].max()) if len(below) else math.nan,
        "below low": float(below["ratio low"].max()) if len(below) else math.nan,
        "below high": float(below["ratio high"].max()) if len(below) else math.nan,
        "above 2T*": float(above["ratio"].min()) if len(above) else math.nan,
        "above spread": float(above.loc[low_at, "spread"]) if len(above) else math.nan,
        "n seeds": int(table["n"].min()),
    }


def spectrum_sweep(
    variants: Mapping[str, dict],
    T_values: Sequence[int],
    seeds,
    *,
    attention: str = "markov",
    device=None,
    T_max: Mapping[str, float] | None = None,
    full_T: int | None = None,
    min_seeds: int = 20,
) -> pd.DataFrame:
    """`spectrum` of the first-layer map of every variant (GapConfig keywords: map, lam, fix)
    at every T (d = T), one seed at a time; one row per (variant, T, seed).

    Why: the maps of one seed share one draw (`gap.first_maps`), so the variants are paired;
    at T = 4096 a map is 128 MB, so seeds run one after another.
    T_max: {label: largest T} for the variants needed only up to some T (the others run at
    every T). full_T: every seed runs up to T = full_T, and above it the first
    max(min_seeds, n (full_T / T)^2) of the n seeds (a dense SVD costs T^3 and a bulk edge
    scatters less at larger T: many seeds where they are cheap, fewer where they are not).
    Columns: variant, attention, T, seed, top, gain, edge, ratio (= top / edge).
    """
    if not variants:
        raise ParameterError("variants must name at least one map")
    T_max = dict(T_max or {})
    if not set(T_max) <= set(variants):
        raise ParameterError(
            f"T_max must name variants of {sorted(variants)}, got {sorted(T_max)}"
        )
    seeds = rng.check_seeds(seeds)
    min_seeds = check_int("min_seeds", min_seeds, minimum=1)
    if full_T is not None:
        full_T = check_int("full_T", full_T, minimum=2)
    rows = []
    for T in T_values:
        T = check_int("T", T, minimum=2)
        labels = [label for label in variants if T_max.get(label, math.inf) >= T]
        if not labels:
            continue
        configs = [
            gap.GapConfig(T=T, d=T, n_layers=1, attention=attention, **variants[label])
            for label in labels
        ]
        n = len(seeds)
        if full_T is not None and full_T < T:
            n = min(n, max(min_seeds, math.ceil(n * (full_T / T) ** 2)))
        for seed in seeds[:n]:
            maps = gap.first_maps(configs, seed, device=device)
            for label, M in zip(labels, maps, strict=True):
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
