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
    "SPECTRUM_COLUMNS",
    "CROSSOVER_COLUMNS",
    "SLOPE_COLUMNS",
    "spectra_figure",
    "crossover_figure",
    "schedule_figure",
    "seed_runs",
    "range_slopes",
    "width_figure",
    "depth_table",
    "depth_figure",
    "gradient_slopes_figure",
    "worst_quotients",
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

    Why: a bulk edge is heavy-tailed (chapter 14), so the chapter compares medians over
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


# Presentation: the tables and figures of the implicit-fixes chapters (18, 19).

SPECTRUM_COLUMNS = {
    "top": r"$\sigma_1(M)$",
    "gain": r"gain $\lVert Mu\rVert$",
    "edge": "bulk edge",
}
CROSSOVER_COLUMNS = {
    "kind": "scores",
    "lam": r"$\lambda$",
    "T* predicted": r"$T^*$ predicted",
    "T* measured": r"$T^*$ measured",
    "error": "relative error [95 %]",
    "below T*/4": r"max $\sigma_1$/edge, $T \le T^*/4$",
    "above 2T*": r"min $\sigma_1$/edge, $T \ge 2T^*$",
    "n seeds": "seeds",
}
SLOPE_COLUMNS = {
    "slope": "slope, every $T$",
    "slope T <= T*": r"slope, $T \le T^*$",
    "slope T >= 2T*": r"slope, $T \ge 2T^*$",
}
_KIND_LINES = {"markov": ("-", ""), "normal": ("--", ", key-query")}  # line style, name suffix


def _plain_log_axis(axis) -> None:
    """Plain numbers (not powers of ten) on a log axis, no minor labels."""
    from matplotlib import ticker

    axis.set_major_formatter(ticker.ScalarFormatter())
    axis.set_minor_formatter(ticker.NullFormatter())


def spectra_figure(median: pd.DataFrame, kinds: Mapping[str, str], curves: Mapping[str, dict]):
    """sigma_1, sqrt(T) x bulk edge and their ratio against T, one row of three panels per kind
    of scores: which maps keep an outlier above a bulk that shrinks like T^(-1/2).

    Parameters
    ----------
    median : DataFrame
        Indexed (attention, variant, T), columns "top", "edge", "ratio" (medians over seeds).
    kinds : dict
        {attention kind: its name}, one row of panels each, in order.
    curves : dict
        {variant: line keywords, "label" included}, the curves of every panel.

    Returns
    -------
    Figure

    Examples
    --------
    >>> index = pd.MultiIndex.from_product([["markov"], ["softmax"], [4, 16]])
    >>> median = pd.DataFrame({"top": [1.0, 1.0], "edge": [1.0, 0.5], "ratio": [1.0, 2.0]}, index)
    >>> fig = spectra_figure(median, {"markov": "Markov"}, {"softmax": {"label": "softmax"}})
    >>> len(fig.axes), fig.axes[1].get_lines()[0].get_ydata().tolist()
    (3, [2.0, 2.0])
    """
    from .plotting import panels, shared_legend

    fig, axes = panels(3 * len(kinds), height=2.3)
    for row, (kind, name) in enumerate(kinds.items()):
        top, edge, ratio = axes[3 * row : 3 * row + 3]
        for label, style in curves.items():
            m = median.loc[(kind, label)]
            top.plot(m.index, m["top"], **style)
            edge.plot(m.index, m["edge"] * np.sqrt(m.index), **style)
            ratio.plot(m.index, m["ratio"], **style)
        top.set(yscale="log", ylabel=rf"{name}" + "\n" + r"$\sigma_1(M)$")
        edge.set(ylabel=r"$\sqrt{T}\times$ bulk edge")
        ratio.set(yscale="log", ylabel=r"$\sigma_1$ / bulk edge")
        for ax in (top, edge, ratio):
            ax.set(xscale="log", xlabel="tokens $T$" if row else None)
            _plain_log_axis(ax.yaxis)
    shared_legend(fig, ncol=3)
    return fig


def crossover_figure(median: pd.DataFrame, lams: Mapping[str, float],
                     edge_constants: Mapping[str, float], curves: Mapping[str, dict]):
    """Gain / edge and sigma_1 / edge of each fixed lam against T / T*, with sqrt(T / T*) and
    the spike law 2x / sqrt(4x - 1) in black: every lam on the one curve the theory predicts.

    Parameters
    ----------
    median : DataFrame
        Indexed (attention, variant, T), columns "gain", "edge", "ratio".
    lams : dict
        {variant: its fixed lam}.
    edge_constants : dict
        {attention kind: c of its T*} ("markov" drawn solid, "normal" dashed).
    curves : dict
        {variant: line keywords with "color" and "label"}.

    Returns
    -------
    Figure

    Examples
    --------
    >>> index = pd.MultiIndex.from_product([["markov"], ["diff"], [40, 80]])
    >>> median = pd.DataFrame({"gain": [0.2, 0.2], "edge": [0.4, 0.2], "ratio": [1.0, 1.5]}, index)
    >>> style = {"diff": {"color": "C0", "label": "differential"}}
    >>> fig = crossover_figure(median, {"diff": 0.8}, {"markov": 2.0}, style)
    >>> fig.axes[0].get_lines()[1].get_ydata().tolist()
    [0.5, 1.0]
    """
    from .plotting import panels, shared_legend

    fig, (left, right) = panels(2, height=3.0)
    x = np.geomspace(0.02, 60, 400)
    left.plot(x, np.sqrt(x), color="k", lw=1, label="prediction")
    spike = np.where(x > 0.5, 2 * x / np.sqrt(np.clip(4 * x - 1, 1e-9, None)), 1)
    right.plot(x, spike, color="k", lw=1)
    for kind, c in edge_constants.items():
        ls, suffix = _KIND_LINES[kind]
        for label, lam in lams.items():
            m = median.loc[(kind, label)]
            star = crossover(lam, c)
            style = {"color": curves[label]["color"], "ls": ls, "marker": "o", "ms": 3}
            left.plot(m.index / star, m["gain"] / m["edge"], label=curves[label]["label"] + suffix,
                      **style)
            right.plot(m.index / star, m["ratio"], **style)
    for ax in (left, right):
        ax.axvline(1, color="0.6", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel=r"$T / T^*$")
    left.set(ylabel="gain / bulk edge")
    right.set(ylabel=r"$\sigma_1(M)$ / bulk edge")
    shared_legend(fig, ncol=3)
    return fig


def schedule_figure(edge_constants: Mapping[str, float], names: Mapping[str, str], contexts,
                    *, n_layers: int = 32, n_heads: int = 1000, seed: int = 0):
    """T* at lam_init(l) layer by layer, with the 10 %-90 % range over heads drawn at
    initialisation (`lambda_draws`) and grey lines at the `contexts`: where a layer's outlier
    stands above its bulk at the context lengths of language models.

    Parameters
    ----------
    edge_constants : dict
        {attention kind: c of its T*} ("markov" drawn solid, "normal" dashed).
    names : dict
        {attention kind: its legend entry}.
    contexts : list of int
        The context lengths drawn as horizontal lines.

    Returns
    -------
    Figure

    Examples
    --------
    >>> fig = schedule_figure({"markov": 2.0}, {"markov": "Markov"}, [512], n_layers=3, n_heads=10)
    >>> [round(float(v), 1) for v in fig.axes[0].get_lines()[0].get_ydata()]
    [6.5, 10.8, 17.4]
    """
    import matplotlib.pyplot as plt

    from .plotting import COLORS, PAGE_WIDTH

    fig, ax = plt.subplots(figsize=(PAGE_WIDTH, 3.2))
    depth_axis = np.arange(1, n_layers + 1)
    heads = [lambda_draws(int(layer), n_heads, seed=seed).numpy() for layer in depth_axis]
    for kind, c in edge_constants.items():
        ls = _KIND_LINES[kind][0]
        stars = np.array([crossover(h, c) for h in heads])
        lo, hi = np.percentile(stars, [10, 90], axis=1)
        star = [crossover(lambda_init(int(layer)), c) for layer in depth_axis]
        ax.plot(depth_axis, star, color=COLORS[3], ls=ls, label=names[kind])
        ax.fill_between(depth_axis, lo, hi, color=COLORS[3], alpha=0.15, lw=0)
    for T in contexts:
        ax.axhline(T, color="0.6", lw=0.8)
    ax.set(yscale="log", xlabel="layer $l$", ylabel=r"$T^*$ at $\lambda_{\mathrm{init}}(l)$")
    ax.legend(loc="upper left")
    return fig


def seed_runs(width: pd.DataFrame, kind: str, label: str,
              metric: str = "gram_stable_rank") -> pd.DataFrame:
    """One map's metric in a width experiment (`gap.width_sweep` rows with an "attention"
    column): one row per T, one column per seed.

    Examples
    --------
    >>> width = pd.DataFrame({"attention": "markov", "variant": "softmax", "T": [8, 8, 16],
    ...                       "seed": [0, 1, 0], "gram_stable_rank": [1.0, 2.0, 3.0]})
    >>> seed_runs(width, "markov", "softmax").to_numpy().tolist()
    [[1.0, 2.0], [3.0, nan]]
    """
    runs = width[(width["attention"] == kind) & (width["variant"] == label)]
    return runs.pivot(index="T", columns="seed", values=metric)


def range_slopes(runs: pd.DataFrame, ranges: Mapping[str, tuple[float, float]]) -> dict:
    """The log-log slope in T of the mean over seeds, and the standard deviation of the seeds'
    own slopes, over each range lo <= T <= hi: how fast a metric grows on either side of a
    threshold, and how sure that is.

    Parameters
    ----------
    runs : DataFrame
        One row per T, one column per seed (`seed_runs`).
    ranges : dict
        {suffix: (lo, hi)}; the result has "slope<suffix>" and "spread<suffix>" (NaN when the
        range holds fewer than 2 T).

    Examples
    --------
    >>> runs = pd.DataFrame({0: [1.0, 2.0, 4.0], 1: [1.0, 2.0, 8.0]}, index=[1, 2, 4])
    >>> {k: round(v, 3) for k, v in range_slopes(runs, {"": (0, 2), " all": (0, 4)}).items()}
    {'slope': 1.0, 'spread': 0.0, 'slope all': 1.292, 'spread all': 0.354}
    """
    from . import fit

    out = {}
    for suffix, (lo, hi) in ranges.items():
        part = runs[(runs.index >= lo) & (runs.index <= hi)]
        if len(part) < 2:
            out[f"slope{suffix}"], out[f"spread{suffix}"] = math.nan, math.nan
            continue
        each = fit.loglog_fit(part.index, part.to_numpy()).slope  # one slope per seed
        out[f"slope{suffix}"] = fit.loglog_fit(part.index, part.mean(axis=1).to_numpy()).slope
        out[f"spread{suffix}"] = float(np.std(each, ddof=1))
    return out


def width_figure(width: pd.DataFrame, kinds: Mapping[str, str], curves: Mapping[str, dict],
                 lam: float, edge_constants: Mapping[str, float]):
    """sr(X_1 X_1^T) after one layer against T, one panel per kind of scores, a +-1.96 std band
    per map and grey lines at T* and 2 T* of `lam`: whether the rank grows while no outlier
    stands above the bulk.

    Parameters
    ----------
    width : DataFrame
        `gap.width_sweep` rows at layer 1 with an "attention" column.
    kinds : dict
        {attention kind: panel title}.
    curves : dict
        {variant: band keywords, "label" included}.
    lam, edge_constants
        The differential map whose T* (with {kind: c}) the grey lines mark.

    Returns
    -------
    Figure

    Examples
    --------
    >>> width = pd.DataFrame({"attention": "markov", "variant": "softmax", "T": [8, 8, 16, 16],
    ...                       "seed": [0, 1, 0, 1], "gram_stable_rank": [1.0, 1.0, 2.0, 2.0]})
    >>> fig = width_figure(width, {"markov": "Markov"}, {"softmax": {"label": "softmax"}}, 0.8,
    ...                    {"markov": 2.0})
    >>> fig.axes[0].get_lines()[0].get_ydata().tolist(), fig.axes[0].get_title()
    ([1.0, 2.0], 'Markov')
    """
    from .plotting import band, panels, shared_legend

    fig, axes = panels(len(kinds), height=3.0)
    for ax, (kind, title) in zip(axes, kinds.items(), strict=True):
        for label, style in curves.items():
            runs = seed_runs(width, kind, label)
            band(ax, runs.index, runs.to_numpy(), width=1.96, **style)
        star = crossover(lam, edge_constants[kind])
        for line in (star, 2 * star):
            ax.axvline(line, color="0.6", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="tokens $T$", title=title)
    axes[0].set(ylabel=r"$\mathrm{sr}(X_1X_1^\top)$")
    shared_legend(fig, ncol=3)
    return fig


def depth_table(runs: Mapping[tuple[str, str], np.ndarray], names: Mapping[str, str],
                layers, title: str) -> pd.DataFrame:
    """The mean sr(X_l X_l^T) over the runs at some depths, per map and module, and how many
    runs reached X = 0 (sr = 0/0, NaN, left out of the mean): a depth experiment in a table.

    Parameters
    ----------
    runs : dict
        {(map, module suffix): (layers + 1, runs) array}.
    names : dict
        {map: its name}; a row is named "<name><module suffix>".
    layers : list of int
        The depths shown.
    title : str
        The header of the first column.

    Examples
    --------
    >>> sr = np.array([[4.0, 4.0], [2.0, np.nan]])
    >>> depth_table({("A", "+LN"): sr}, {"A": "$A$"}, [1], "map").to_dict("records")
    [{'map': '$A$+LN', '$\\\\ell = 1$': 2.0, 'runs with $X = 0$': 1}]
    """
    rows = [
        {title: names[label] + module}
        | {rf"$\ell = {t}$": pd.Series(values[t]).mean() for t in layers}
        | {"runs with $X = 0$": int(np.isnan(values).any(0).sum())}
        for (label, module), values in runs.items()
    ]
    return pd.DataFrame(rows)


def depth_figure(runs: Mapping[tuple[str, str], np.ndarray], curves: Mapping[str, dict]):
    """sr(X_l X_l^T) against depth, one panel per module (two per row, shared y), a +-1.96 std
    band per map: which maps collapse the tokens, whatever the modules.

    Parameters
    ----------
    runs : dict
        {(map, module suffix): (layers + 1, runs) array}, four modules ("" is bare).
    curves : dict
        {map: band keywords, "label" included}.

    Returns
    -------
    Figure

    Examples
    --------
    >>> sr = np.ones((3, 2))
    >>> runs = {("A", m): sr for m in ("", "+LN", "+skip", "+skip+LN")}
    >>> fig = depth_figure(runs, {"A": {"label": "$A$"}})
    >>> [ax.get_title() for ax in fig.axes]
    ['bare', 'LN', 'skip', 'skip+LN']
    """
    from .plotting import band, panels, shared_legend

    modules = list(dict.fromkeys(module for _, module in runs))
    fig, axes = panels(len(modules), height=2.4, ncols=2, sharey=True)
    n_layers = len(next(iter(runs.values()))) - 1
    layers_axis = np.arange(1, n_layers + 1)
    for ax, module in zip(axes, modules, strict=True):
        for label, style in curves.items():
            band(ax, layers_axis, runs[(label, module)][1:], width=1.96, **style)
        title = "bare" if not module else module.lstrip("+")
        ax.set(yscale="log", title=title, xlabel=r"depth $\ell$")
    for ax in axes[::2]:
        ax.set(ylabel=r"$\mathrm{sr}(X_\ell X_\ell^\top)$")
    shared_legend(fig, ncol=4)
    return fig


def gradient_slopes_figure(slopes: pd.DataFrame, kinds: Mapping[str, str],
                           curves: Mapping[str, dict], modules: Mapping[str, str]):
    """The gradient norm's log-log slope in T per map (a dot each) and module set (x axis), one
    panel per kind of scores, with the reference L - 1 = 1: which maps steepen the gradients.

    Parameters
    ----------
    slopes : DataFrame
        Index the maps, columns (kind, variant).
    kinds : dict
        {attention kind: panel title}.
    curves : dict
        {map: keywords with "color" and "label"}, four maps or so (spread by 0.1 around
        each module).
    modules : dict
        {variant: its tick label}, in order.

    Returns
    -------
    Figure

    Examples
    --------
    >>> slopes = pd.DataFrame({("markov", "plain"): [2.0]}, index=["softmax"])
    >>> fig = gradient_slopes_figure(slopes, {"markov": "Markov"},
    ...                              {"softmax": {"color": "C0", "label": "softmax"}},
    ...                              {"plain": "bare"})
    >>> fig.axes[0].get_lines()[0].get_ydata().tolist()
    [2.0]
    """
    from .plotting import panels, shared_legend

    fig, axes = panels(len(kinds), height=2.8, sharey=True)
    positions = np.arange(len(modules))
    for ax, (kind, title) in zip(axes, kinds.items(), strict=True):
        for i, (label, style) in enumerate(curves.items()):
            values = [slopes.loc[label, (kind, v)] for v in modules]
            ax.plot(positions + 0.1 * (i - 1.5), values, "o", color=style["color"],
                    label=style["label"])
        ax.axhline(1, color="0.6", lw=0.8)
        ax.set_xticks(positions, list(modules.values()))
        ax.set(title=title, xlabel="module")
    axes[0].set(ylabel=r"slope of $\log\|J\|_F^2$ in $\log T$")
    shared_legend(fig, ncol=4)
    return fig


def worst_quotients(spectra: pd.DataFrame, labels, reference: str = "softmax",
                    level: float = 0.95) -> dict:
    """Each map's top / edge divided seed by seed by the reference map's on the same draw, at
    the T where the median of that quotient is largest, with its `median_interval`: whether
    a map shrinks the gap at every T, judged where it shrinks it least.

    Parameters
    ----------
    spectra : DataFrame
        `spectrum_sweep` rows (attention, variant, T, seed, ratio) holding the reference.
    labels : list of str
        The maps compared with the reference.

    Returns
    -------
    dict
        {(attention kind, map): (median, low, high)}, kinds in sorted order.

    Examples
    --------
    >>> spectra = pd.DataFrame({"attention": "markov", "T": [8, 8, 8, 8],
    ...                         "seed": [0, 0, 1, 1], "variant": ["softmax", "fix"] * 2,
    ...                         "ratio": [4.0, 1.0, 2.0, 1.0]})
    >>> worst_quotients(spectra, ["fix"])
    {('markov', 'fix'): (0.375, 0.25, 0.5)}
    """
    by_seed = spectra.pivot_table(index=["attention", "T", "seed"], columns="variant",
                                  values="ratio")
    quotient = by_seed[list(labels)].div(by_seed[reference], axis=0)
    by_T = quotient.groupby(["attention", "T"]).median()
    return {
        (kind, label): median_interval(quotient.loc[(kind, by_T.loc[kind, label].idxmax()), label],
                                       level)
        for kind in by_T.index.unique("attention")
        for label in labels
    }
