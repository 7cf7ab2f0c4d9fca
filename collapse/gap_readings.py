"""Readings of the Mind-the-Gap experiments: the spectra, slopes, intervals and per-cell
summaries that the chapters on Nait Saada, Naderi and Tanner (2025) show and test.

Why: a chapter shows a table or a verdict of these numbers; how each is read off the runs
(which seeds, which singular values, which statistic over seeds) is the same every time and
lives here, once, with its tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch
from scipy import stats

from . import fit, gap, markov, metrics, rng, runtime
from .attention import remove_outlier

__all__ = [
    "markov_matrix",
    "bulk",
    "dense_spectrum",
    "markov_summary",
    "lanczos_top_two",
    "edge_summary",
    "fix_summary",
    "keyquery_draws",
    "keyquery_summary",
    "gamma_summary",
    "MeanInterval",
    "mean_interval",
    "at_layer",
    "per_seed",
    "seed_slopes",
    "loglog_row",
    "width_checks",
    "interval_text",
    "local_slopes",
    "branch_ratio",
    "layer_slopes",
    "depth_name",
    "depth_style",
    "depth_stacks",
    "figure_cells",
    "seed_study",
    "compare_cells",
]


def markov_matrix(T: int, seed: int, device=None) -> torch.Tensor:
    """Seed `seed`'s T x T random Markov matrix, from its own stream per (seed, T), so that a
    smaller run sees exactly the first matrices of a larger one.

    Examples
    --------
    >>> markov_matrix(4, 0).sum(-1)
    tensor([1.0000, 1.0000, 1.0000, 1.0000], dtype=torch.float64)
    """
    return markov.random_markov(T, generator=rng.generator(seed, T), device=device)


def bulk(singular_values: torch.Tensor, T: int) -> np.ndarray:
    """sqrt(T) sigma_i for i >= 2, per matrix (..., T - 1): what the quarter-circle law
    describes."""
    return math.sqrt(T) * singular_values[..., 1:].numpy()


def dense_spectrum(T: int, seeds: Sequence[int]) -> dict[str, torch.Tensor]:
    """Every seed's Markov matrix with all its singular values and eigenvalues, on the CPU.

    Returns
    -------
    dict
        "A": (seeds, T, T) matrices; "sv": (seeds, T) singular values, decreasing; "eig":
        (seeds, T) eigenvalues by decreasing modulus.
    """
    A = torch.stack([markov_matrix(T, s) for s in seeds])
    return {"A": A, "sv": torch.linalg.svdvals(A), "eig": markov.eigenvalues(A)}


def markov_summary(spectrum: dict, T: int) -> dict[str, float]:
    """One row of the Markov model's table at one T, pooled over seeds: the outlier, the fit
    of the bulk to the quarter-circle law, the edge and the eigenvalue radius.

    Parameters
    ----------
    spectrum : dict
        A `dense_spectrum` of size T.
    """
    sv, eig = spectrum["sv"], spectrum["eig"]
    x = bulk(sv, T)
    return {
        "max |λ1 − 1|": (eig[:, 0] - 1).abs().max().item(),
        "max |σ1 − 1|": (sv[:, 0] - 1).abs().max().item(),
        "T(σ1 − 1) mean": (T * (sv[:, 0] - 1)).mean().item(),
        "KS": markov.ks_distance(x),
        "mean x²": markov.second_moment(x),
        "median √T σ2": np.median(x[:, 0]),
        "√T σ2 min": x[:, 0].min(),
        "√T σ2 max": x[:, 0].max(),
        "median √T |λ2|": math.sqrt(T) * eig[:, 1].abs().median().item(),
    }


def lanczos_top_two(T: int, seeds: Sequence[int], device=None, cores: int = 1) -> torch.Tensor:
    """sigma_1, sigma_2 of every seed's Markov matrix by Lanczos, (seeds, 2) on the CPU, one
    matrix at a time (2 GiB each at T = 16384).

    The matrix-vector products are memory-bound and get `cores` threads; the library keeps its
    small steps on one.
    """
    with runtime.use_threads(cores):
        return torch.stack(
            [
                markov.top_singular_values(
                    markov_matrix(T, s, device=device), 2, method="lanczos"
                ).cpu()
                for s in seeds
            ]
        )


def edge_summary(tops: dict, lanczos_T: Sequence[int]) -> pd.DataFrame:
    """The outlier and the edge per T, from {T: (seeds, 2) top singular values}: one row per
    T (sorted), with the method that computed it."""
    return pd.DataFrame(
        {
            T: {
                "method": "Lanczos" if T in lanczos_T else "dense",
                "T(σ1 − 1) mean": (T * (v[:, 0] - 1)).mean().item(),
                "median √T σ2": math.sqrt(T) * v[:, 1].median().item(),
                "max √T σ2": math.sqrt(T) * v[:, 1].max().item(),
            }
            for T, v in sorted(tops.items())
        }
    ).T.rename_axis("T")


def fix_summary(spectrum: dict) -> dict[str, float]:
    """The checks of the fix A - 11^T/T on a `dense_spectrum`: A-perp 1 = 0, the deflated
    spectrum (matched distance to A's with its eigenvalue 1 replaced by 0), and the range of
    sigma_1(A-perp) / sigma_2(A) over seeds."""
    A, sv, eig = spectrum["A"], spectrum["sv"], spectrum["eig"].clone()
    P = remove_outlier(A)
    eig[:, 0] = 0  # A's spectrum with its Perron eigenvalue 1 replaced by 0
    ratio = (torch.linalg.svdvals(P)[:, 0] / sv[:, 1]).numpy()
    return {
        "max ‖A⊥1‖∞": P.sum(-1).abs().max().item(),
        "eigenvalue mismatch": markov.matched_distance(
            eig.numpy(), markov.eigenvalues(P).numpy()
        ),
        "σ1(A⊥)/σ2(A) min": ratio.min(),
        "σ1(A⊥)/σ2(A) max": ratio.max(),
    }


def keyquery_draws(T: int, d: int, kind: str, seeds: Sequence[int]) -> torch.Tensor:
    """Key-query attention A(X) for every seed, (seeds, T, T): isometric X (T x d), then W_Q,
    W_K of law `kind` ("normal" or "xavier"), from the stream of (seed, T, d)."""
    out = []
    for s in seeds:
        g = rng.generator(s, 1_000_000 + 10_000 * T + d)
        out.append(gap.attention_matrices(gap.isometric_input(T, d, generator=g), kind, g))
    return torch.stack(out)


def keyquery_summary(A: torch.Tensor, T: int) -> dict[str, float]:
    """Key-query attention at one size, over seeds: the logit spread, the outlier, the edge,
    the scale and shape of the bulk and the distance from uniform attention."""
    sv = torch.linalg.svdvals(A)
    x = bulk(sv, T)
    perp = torch.linalg.matrix_norm(remove_outlier(A), 2)
    return {
        "logit std (median)": markov.logit_std(A).median().item(),
        "logit std range": np.ptp(markov.logit_std(A).numpy()),
        "σ1 max": sv[:, 0].max().item(),
        "median √T σ2": np.median(x[:, 0]),
        "√T σ2 min": x[:, 0].min(),
        "√T σ2 max": x[:, 0].max(),
        "E x²": markov.second_moment(x),
        "shape KS": markov.ks_distance(x / math.sqrt(markov.second_moment(x))),
        "‖A − 11ᵀ/T‖₂ median": perp.median().item(),
    }


def gamma_summary(kind: str, gamma: float, T: int, seeds: Sequence[int]) -> dict[str, float]:
    """Rebuttal Fig. IX at one gamma = T / d (d rounded, at least 1), medians over seeds: the
    logit spread, the outlier, the edge, and the scale and shape of the bulk."""
    d = max(1, round(T / gamma))
    A = keyquery_draws(T, d, kind, seeds)
    x = bulk(torch.linalg.svdvals(A), T)
    m2 = markov.second_moment(x)
    return {
        "d": d,
        "logit std": markov.logit_std(A).median().item(),
        "σ1 median": torch.linalg.svdvals(A)[:, 0].median().item(),
        "median √T σ2": np.median(x[:, 0]),
        "E x²": m2,
        "shape KS": markov.ks_distance(x / math.sqrt(m2)) if m2 > 0 else math.nan,
    }


class MeanInterval(NamedTuple):
    """A mean over independent runs with its seed-to-seed std and confidence interval."""

    mean: float
    std: float
    low: float
    high: float


def mean_interval(x, level: float = 0.95) -> MeanInterval:
    """The mean of per-seed values, their std (ddof 1) and the Student-t interval of the mean:
    what a verdict on a few independent runs can decide.

    Examples
    --------
    >>> m = mean_interval([1.0, 2.0, 3.0])
    >>> [float(round(v, 3)) for v in (m.mean, m.std, m.low, m.high)]
    [2.0, 1.0, -0.484, 4.484]
    """
    x = np.asarray(x, dtype=float)
    mean, std = x.mean(), x.std(ddof=1)
    half = stats.t.ppf((1 + level) / 2, len(x) - 1) * std / len(x) ** 0.5
    return MeanInterval(mean, std, mean - half, mean + half)


def at_layer(frame: pd.DataFrame, layer: int, metric: str = "gram_stable_rank",
             stat: str = "mean") -> pd.DataFrame:
    """A statistic over seeds of a `gap.width_sweep` frame at one layer: rows (gamma,
    variant), one column per T."""
    return (
        frame[frame["layer"] == layer]
        .groupby(["gamma", "variant", "T"])[metric]
        .agg(stat)
        .unstack("T")
    )


def per_seed(frame: pd.DataFrame, gamma: float, label: str,
             metric: str = "gram_stable_rank") -> pd.DataFrame:
    """One variant's metric at layer 1 and one gamma: one row per seed, one column per T."""
    at = frame[(frame["layer"] == 1) & (frame["gamma"] == gamma) & (frame["variant"] == label)]
    return at.pivot(index="seed", columns="T", values=metric)


def seed_slopes(frame: pd.DataFrame, metric: str, gamma: float, label: str) -> np.ndarray:
    """The slope of each seed's own log metric against log T at layer 1, over T >= 20,
    (seeds,)."""
    at = frame[
        (frame["layer"] == 1)
        & (frame["gamma"] == gamma)
        & (frame["variant"] == label)
        & (frame["T"] >= 20)
    ]
    return np.array(
        [fit.loglog_fit(one["T"], one[metric]).slope for _, one in at.groupby("seed")]
    )


def loglog_row(frame: pd.DataFrame, metric: str, gamma: float, label: str) -> dict:
    """(slope, R^2) of log mean metric against log T at layer 1 over T >= 20, and the std of
    the seeds' own slopes (its uncertainty)."""
    row = at_layer(frame, 1, metric).loc[(gamma, label)].dropna()
    row = row[row.index >= 20]
    line = fit.loglog_fit(row.index, row.to_numpy())
    spread = np.std(seed_slopes(frame, metric, gamma, label))
    return {"slope": line.slope, "R²": line.r2, "seed slopes: std": spread}


def width_checks(frame: pd.DataFrame, families: Mapping, gammas: Sequence[float]) -> pd.DataFrame:
    """The width verdicts' numbers per attention family and gamma at layer 1, each with
    ': std', ': low' and ': high' (seed-to-seed std, 95 % interval of the mean).

    Parameters
    ----------
    frame : DataFrame
        A `gap.width_sweep` frame with the column "gram_stable_rank".
    families : mapping
        {family: (unfixed variant, fixed variant)}.

    Returns
    -------
    DataFrame
        Rows (attention, γ): the largest unfixed sr over T >= 20, the seeds' slopes without
        and with the fix, and the smallest ratio fix / no fix over T >= 40 (seed by seed).
    """
    out = {}
    for family, (plain, fixed) in families.items():
        for g in gammas:
            p, f = per_seed(frame, g, plain), per_seed(frame, g, fixed)
            top = p.loc[:, p.columns >= 20].mean().idxmax()
            ratio = (f / p).loc[:, p.columns >= 40]
            numbers = {
                "max sr, no fix": p[top],
                "slope, no fix": seed_slopes(frame, "gram_stable_rank", g, plain),
                "slope, fix": seed_slopes(frame, "gram_stable_rank", g, fixed),
                "min fix / no fix, T ≥ 40": ratio[ratio.mean().idxmin()],
            }
            out[(family, g)] = {
                name + part: value
                for name, x in numbers.items()
                for part, value in zip(
                    ("", ": std", ": low", ": high"), mean_interval(x), strict=True
                )
            }
    return pd.DataFrame(out).T.rename_axis(["attention", "γ"])


def interval_text(row, name: str) -> str:
    """'[low, high]': the interval of one of `width_checks`' numbers in a row of it."""
    from .tables import number

    return f"[{number(row[name + ': low'])}, {number(row[name + ': high'])}]"


def local_slopes(row: pd.Series) -> pd.Series:
    """The slope of log values against log T between consecutive T of `row` (indexed by T,
    NaN dropped), indexed by the interval each spans ("20 to 40")."""
    row = row.dropna()
    Ts = row.index
    slopes = np.diff(np.log(row.to_numpy())) / np.diff(np.log(Ts.to_numpy(dtype=float)))
    return pd.Series(slopes, index=[f"{a} to {b}" for a, b in zip(Ts[:-1], Ts[1:], strict=True)])


def branch_ratio(kind: str, T: int, gamma: float, seeds: Sequence[int]) -> np.ndarray:
    """||A⊥ X0 W||_F / ||X0||_F at layer 1 with the fix and a skip, per seed: the attention
    branch's size beside the skip connection."""
    config = gap.GapConfig(
        T=T, d=gap.width_for(T, gamma), n_layers=1, attention=kind, fix=True, skip=True
    )
    parts = gap.first_layer(config, seeds)
    branch = metrics.frobenius(parts["X1"] - parts["X0"])
    return (branch / metrics.frobenius(parts["X0"])).numpy()


def layer_slopes(frame: pd.DataFrame, label: str, gamma: float, n_layers: int) -> pd.Series:
    """Log-log slope in T of the mean sr(XX^T) (NaN runs left out) at every layer >= 1."""
    out = {}
    for layer in range(1, n_layers + 1):
        row = at_layer(frame, layer).loc[(gamma, label)].dropna()
        out[layer] = fit.loglog_fit(row.index, row.to_numpy()).slope if len(row) > 1 else np.nan
    return pd.Series(out)


# Depth: the nine configurations of rebuttal Fig. VII, layer by layer (chapter 18).

_MODULE_COLORS = {"": 0, "+LN": 1, "+skip": 2, "+skip+LN": 3}


def depth_name(label: str) -> str:
    r"""A Fig. VII configuration as the page writes it, in math.

    Examples
    --------
    >>> depth_name("A⊥+skip"), depth_name("A+LN"), depth_name("Identity A")
    ('$A^\\perp$+skip', '$A$+LN', 'identity $A$')
    """
    if label == "Identity A":
        return "identity $A$"
    if label.startswith("A⊥"):
        return r"$A^\perp$" + label.removeprefix("A⊥")
    return "$A$" + label.removeprefix("A")


def depth_style(label: str) -> dict:
    """Line keywords of a Fig. VII configuration, so that a reader tells the curves apart:
    colour by module, solid for A⊥, dashed for A, black dotted for Identity A.

    Examples
    --------
    >>> depth_style("A⊥+LN")["ls"], depth_style("A+LN")["ls"], depth_style("Identity A")
    ('-', '--', {'color': 'k', 'ls': ':'})
    """
    from .plotting import COLORS

    if label == "Identity A":
        return {"color": "k", "ls": ":"}
    modules = label.removeprefix("A⊥").removeprefix("A")
    return {"color": COLORS[_MODULE_COLORS[modules]], "ls": "-" if "⊥" in label else "--"}


def depth_stacks(T: int, d: int, n_layers: int, seeds, **kw) -> dict:
    """Per-layer metrics of the nine Fig. VII configurations at one size, paired by seed.

    Returns {metric: {label: (n_layers + 1, n_seeds) array}}; `kw` goes to
    `gap.simulate_many` (e.g. `seed_batch`).
    """
    variants = gap.fig7_variants("markov")
    configs = [gap.GapConfig(T=T, d=d, n_layers=n_layers, **v) for v in variants.values()]
    result = gap.simulate_many(configs, seeds, **kw)
    return {metric: dict(zip(variants, value.numpy(), strict=True))
            for metric, value in result.items()}


def figure_cells(figure: Mapping, floor: float = 1.5) -> list[tuple[str, int, float]]:
    """(label, depth, value) of every value read off a figure above `floor`: the cells a
    comparison tests (the collapsed values near 1 are another verdict's).

    Examples
    --------
    >>> figure_cells({"A⊥": {1: 9.6, 10: 1.8}, "A": {1: 1.0}})
    [('A⊥', 1, 9.6), ('A⊥', 10, 1.8)]
    """
    return [(label, t, f) for label, row in figure.items() for t, f in row.items() if f > floor]


def seed_study(runs: Mapping, cells, group: int, tolerance: float) -> pd.DataFrame:
    """How far apart the means of disjoint groups of `group` consecutive runs fall, against
    each figure value: why a figure's few-run mean is compared with many runs, not one group.

    Parameters
    ----------
    runs : mapping
        {label: (layer, seed) array}, as one metric of `depth_stacks`.
    cells : list
        (label, depth, figure value), as from `figure_cells`.

    Returns
    -------
    DataFrame
        Rows (config, depth); "group means" holds each row's (n_groups,) array.
    """
    n_groups = len(next(iter(runs.values()))[0]) // group
    if n_groups < 1:
        raise ValueError(f"the runs ({len(next(iter(runs.values()))[0])}) must be at least "
                         f"one group ({group})")
    rows = {}
    for label, t, f in cells:
        means = runs[label][t, : n_groups * group].reshape(n_groups, group).mean(1)
        ratios = f / means
        rows[(label, t)] = {
            "figure": f,
            "group means": means,
            "figure / mean of all runs": f / runs[label][t].mean(),
            "groups within ±20 %": np.mean(np.abs(ratios - 1) <= tolerance),
            "figure / first group": ratios[0],
            "group means: lowest": means.min(),
            "group means: highest": means.max(),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(["config", "depth"])


def compare_cells(runs: Mapping, cells, tolerance: float) -> pd.DataFrame:
    """Each figure value against the mean of all runs and its 95 % interval: it agrees when
    within ±tolerance of every mean the interval allows, disagrees when outside of every
    one, and is undecided otherwise (more runs settle it).

    Returns a DataFrame with one row per cell: config, depth, figure, mean, CI low, CI high,
    figure / mean, status.

    Examples
    --------
    >>> runs = {"A⊥": np.array([[2.0, 2.1, 1.9, 2.0]])}
    >>> compare_cells(runs, [("A⊥", 0, 2.0), ("A⊥", 0, 3.0)], 0.2)["status"].tolist()
    ['agrees', 'disagrees']
    """
    rows = []
    for label, t, f in cells:
        m, _, lo, hi = mean_interval(runs[label][t])
        if (1 - tolerance) * hi <= f <= (1 + tolerance) * lo:
            status = "agrees"
        elif f < (1 - tolerance) * lo or f > (1 + tolerance) * hi:
            status = "disagrees"
        else:
            status = "undecided"
        rows.append((label, t, f, m, lo, hi, f / m, status))
    columns = ["config", "depth", "figure", "mean", "CI low", "CI high", "figure / mean", "status"]
    return pd.DataFrame(rows, columns=columns)
