"""Mind the Gap's outlier(s) under an attention mask: how many singular values of a random
masked softmax map stand above its bulk, and the first layer's stable rank once they are all
removed.

A random Markov map under a mask is A = masked_softmax(G, mask) with i.i.d. logits
G ~ N(-ln 2 / 2, ln 2) (`markov.random_logits`). The allowed entries of a row are
exchangeable, so E[A] = P exactly, each row uniform over its allowed keys (the softmax of zero
scores, which `attention_maps.centred_map` subtracts), and A = P + N with E[N] = 0. Without a
mask P = 11^T / T has the one singular value 1 and N = A - P is Mind the Gap's A⊥, whose
singular values fill [0, 2 / sqrt(T)].

The rule (ours, fixed before any run): an *outlier* of A is a singular value above
`OUTLIER_MARGIN` = 1.1 times the *bulk edge* sigma_1(A - P), the top singular value of the
centred map (1.1 is the chapters' bound for "no outlier": the spike law gives 1 there).
Without a mask it counts Mind the Gap's one outlier: sigma_1(A) >= ||A u|| = 1 and, A - P
being A (I - u u^T), sigma_2(A) <= sigma_1(A - P). *Removing them all* (`remove_outliers`)
subtracts from A its top-k singular triplets, k the count; without a mask that is close to
A⊥, which removes the direction u exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from . import masks as _masks
from . import rng
from .attention import masked_softmax
from .attention_maps import centred_map
from .checks import ParameterError, check_float, check_int
from .gap import GapConfig, input_and_generator
from .gap_readings import mean_interval, seed_slopes
from .markov import random_logits
from .metrics import gram_stable_rank

__all__ = [
    "OUTLIER_MARGIN",
    "MAPS",
    "remove_outliers",
    "layer_draws",
    "MaskedWidth",
    "masked_width_sweep",
    "masked_width_flops",
    "count_table",
    "slope_table",
    "spectrum_figure",
    "width_figure",
]

OUTLIER_MARGIN = 1.1  # an outlier stands above 1.1 times the bulk edge sigma_1(A - E[A])
MAPS = ("softmax", "centred", "deflated")  # A; A - E[A]; A without its counted outliers


def remove_outliers(A: torch.Tensor, mask: torch.Tensor, margin: float = OUTLIER_MARGIN):
    """A's outliers under `mask` counted by the rule, and A with all of them removed.

    Parameters
    ----------
    A : Tensor
        (..., T, T) attention maps under `mask` (rows summing to 1 over the allowed keys).
    mask : Tensor
        (T, T) boolean mask, as `masks.make` builds it.
    margin : float
        An outlier is a singular value above margin x sigma_1(A - P), P the rows' uniform
        weights over their allowed keys (E[A] for random Markov logits).

    Returns
    -------
    dict
        "deflated": A minus its top-k singular triplets, k the count; "count": k (int64);
        "edge": sigma_1(A - P); "singular": A's singular values, decreasing.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> A = torch.softmax(torch.randn(64, 64, generator=g, dtype=torch.float64), -1)
    >>> out = remove_outliers(A, torch.ones(64, 64, dtype=torch.bool))
    >>> int(out["count"]), round(float(out["singular"][0]), 2), round(float(out["edge"]), 2)
    (1, 1.01, 0.32)
    >>> bool(torch.linalg.matrix_norm(out["deflated"], 2) <= 1.1 * out["edge"])
    True
    """
    margin = check_float("margin", margin, positive=True)
    U, sigma, Vh = torch.linalg.svd(A)
    edge = torch.linalg.matrix_norm(centred_map(A, mask), 2)
    count = (sigma > margin * edge[..., None]).sum(-1)
    kept = sigma * (torch.arange(sigma.shape[-1]) < count[..., None])  # the outliers' values
    deflated = A - (U * kept[..., None, :]) @ Vh
    return {"deflated": deflated, "count": count, "edge": edge, "singular": sigma}


def layer_draws(T: int, seeds: Sequence[int]) -> dict[str, torch.Tensor]:
    """The first layer's draws at d = T for each seed, stacked: the isometric input "X0", the
    logits "G" and the value weights "W", in the Mind-the-Gap stack's order (`gap`), so that
    softmax(G) is the very random Markov A of `gap.simulate` for the same seed.

    Examples
    --------
    >>> draws = layer_draws(4, [0, 1])
    >>> sorted(draws), tuple(draws["G"].shape)
    (['G', 'W', 'X0'], (2, 4, 4))
    """
    T = check_int("T", T, minimum=2)
    config = GapConfig(T=T, d=T, n_layers=1)
    out = {"X0": [], "G": [], "W": []}
    for seed in rng.check_seeds(seeds):
        X0, g = input_and_generator(config, seed)
        out["X0"].append(X0)
        out["G"].append(random_logits(T, generator=g))
        out["W"].append(torch.randn(T, T, generator=g, dtype=torch.float64))
    return {k: torch.stack(v) for k, v in out.items()}


class MaskedWidth(NamedTuple):
    """What `masked_width_sweep` measures: the outliers of each map, and the width run."""

    spectra: pd.DataFrame  # mask, T, seed, count, edge, s1, s2, ... (A's top singular values)
    width: pd.DataFrame  # mask, variant, gamma, T, d, layer, seed, gram_stable_rank


def _check_masks(mask_names) -> list[str]:
    names = [str(n) for n in mask_names]
    if not names or len(set(names)) != len(names):
        raise ParameterError(f"mask_names must list distinct masks, got {mask_names}")
    unknown = [n for n in names if n not in _masks.names()]
    if unknown:
        allowed = ", ".join(_masks.names())
        raise ParameterError(f"mask must be one of {allowed}; got {unknown[0]!r}")
    return names


def masked_width_sweep(
    mask_names: Sequence[str],
    T_values: Sequence[int],
    seeds,
    *,
    margin: float = OUTLIER_MARGIN,
    n_singular: int = 12,
) -> MaskedWidth:
    """For every mask, T and seed: the outliers of the random masked map A (`remove_outliers`)
    and the stable rank sr(X_1 X_1^T) of one layer X_1 = M X_0 W at d = T (gamma = 1) for
    M = A ("softmax"), A - E[A] ("centred") and A without its outliers ("deflated").

    Why: Mind the Gap removes "the outlier eigenvalue(s)"; under a mask the count is ours to
    measure, and whether removing them restores rank in width. Every mask of one seed and T
    shares the draws X_0, G, W (`layer_draws`): the masks are paired, and the complete mask's
    softmax layer is `gap.simulate`'s. The width frame has `gap.width_sweep`'s columns (plus
    "mask"), so `gap_readings` reads it; the spectra frame keeps A's `n_singular` largest
    singular values.
    """
    names = _check_masks(mask_names)
    seeds = rng.check_seeds(seeds)
    n_singular = check_int("n_singular", n_singular, minimum=1)
    spectra, width = [], []
    for T in T_values:
        T = check_int("T", T, minimum=2)
        draws = layer_draws(T, seeds)
        for name in names:
            mask = _masks.make(name, T)
            A = masked_softmax(draws["G"], mask)
            out = remove_outliers(A, mask, margin)
            top = out["singular"][:, :n_singular].numpy()
            for s, seed in enumerate(seeds):
                row = {"mask": name, "T": T, "seed": seed, "count": int(out["count"][s])}
                spectra.append(row | {"edge": float(out["edge"][s])} | {
                    f"s{i + 1}": float(v) for i, v in enumerate(top[s])
                })
            maps = {"softmax": A, "centred": centred_map(A, mask), "deflated": out["deflated"]}
            for variant, M in maps.items():
                sr = gram_stable_rank(M @ draws["X0"] @ draws["W"]).numpy()
                width += [
                    {"mask": name, "variant": variant, "gamma": 1.0, "T": T, "d": T, "layer": 1,
                     "seed": seed, "gram_stable_rank": float(sr[s])}
                    for s, seed in enumerate(seeds)
                ]
    return MaskedWidth(pd.DataFrame(spectra), pd.DataFrame(width))


def masked_width_flops(n_masks: int, T_values, n_seeds: int) -> float:
    """FLOPs of `masked_width_sweep` (dense-kernel estimates, `cost.dense_flops`): per T and
    seed the Haar input (a QR); per mask the full SVD of A (about 21 T^3 with its singular
    vectors), the norm of A - P, the deflation (2 T^3) and, for each of the three maps,
    M X_0 W, its Gram matrix and the Gram matrix's spectrum.

    Examples
    --------
    >>> masked_width_flops(1, [8], 1) > 0
    True
    """
    from .cost import dense_flops

    n_masks = check_int("n_masks", n_masks, minimum=1)
    n_seeds = check_int("n_seeds", n_seeds, minimum=1)
    total = 0.0
    for T in T_values:
        per_mask = (
            21 * T**3 + dense_flops("svdvals", T) + 2 * T**3
            + len(MAPS) * (4 * T**3 + 2 * T**3 + dense_flops("eigvalsh", T))
        )
        total += n_seeds * (dense_flops("qr", T) + n_masks * per_mask)
    return total


# Presentation: the tables and figures of the masked-width chapter (16).


def count_table(spectra: pd.DataFrame, labels) -> pd.DataFrame:
    """The outlier counts as text, one row per T, one column per mask: the median over the
    seeds, and the range when the seeds disagree ("2 (1–3)").

    Examples
    --------
    >>> spectra = pd.DataFrame({"mask": "causal", "T": [8, 8, 16], "count": [1, 2, 2]})
    >>> count_table(spectra, {"causal": "causal"}).to_dict("list")
    {'T': [8, 16], 'causal': ['1.5 (1–2)', '2']}
    """
    def text(counts) -> str:
        low, high, median = counts.min(), counts.max(), counts.median()
        middle = f"{median:g}"
        return middle if low == high else f"{middle} ({low}–{high})"

    table = spectra.groupby(["T", "mask"])["count"].agg(text).unstack("mask")
    return table.reindex(columns=list(labels)).rename(columns=dict(labels)).reset_index()


def slope_table(width: pd.DataFrame, mask_names, variants=MAPS) -> pd.DataFrame:
    """The log-log slopes in T of each seed's sr(X_1 X_1^T) (over T >= 20, `gap_readings`'s
    method), per mask and map: their mean, standard deviation and 95 % interval (Student's t).

    Examples
    --------
    >>> width = pd.DataFrame({"mask": "causal", "variant": "softmax", "gamma": 1.0,
    ...                       "T": [20, 40, 20, 40], "layer": 1, "seed": [0, 0, 1, 1],
    ...                       "gram_stable_rank": [1.0, 2.0, 1.0, 4.0]})
    >>> row = slope_table(width, ["causal"], ["softmax"]).iloc[0]
    >>> round(float(row["slope"]), 3), round(float(row["std"]), 3)
    (1.5, 0.707)
    """
    rows = []
    for name in mask_names:
        part = width[width["mask"] == name]
        for variant in variants:
            m = mean_interval(seed_slopes(part, "gram_stable_rank", 1.0, variant))
            rows.append({"mask": name, "variant": variant, "slope": m.mean, "std": m.std,
                         "low": m.low, "high": m.high})
    return pd.DataFrame(rows)


def spectrum_figure(spectra: pd.DataFrame, T: int, curves, margin: float = OUTLIER_MARGIN):
    """sigma_i(A) / bulk edge against i at one T, the median over the seeds, one line per
    mask, with the rule's threshold: a gap, or a continuum without one.

    curves: {mask name: line keywords, "label" included}, in the order drawn.

    Examples
    --------
    >>> spectra = pd.DataFrame({"mask": "complete", "T": 8, "seed": [0, 1], "edge": 0.5,
    ...                         "s1": 1.0, "s2": [0.4, 0.6]})
    >>> fig = spectrum_figure(spectra, 8, {"complete": {"label": "complete"}})
    >>> fig.axes[0].get_lines()[0].get_ydata().tolist()
    [2.0, 1.0]
    """
    from .plotting import panels, plain_log_ticks, shared_legend

    fig, (ax,) = panels(1, height=3.0)
    at = spectra[spectra["T"] == T]
    columns = [c for c in at.columns if c.startswith("s") and c[1:].isdigit()]
    for name, style in curves.items():
        one = at[at["mask"] == name]
        ratio = one[columns].div(one["edge"], axis=0).median()
        ax.plot(np.arange(1, len(columns) + 1), ratio.to_numpy(), marker="o", ms=4, **style)
    ax.axhline(margin, color="0.4", lw=1, ls=":", label=f"{margin:g} × bulk edge (the rule)")
    ax.set(yscale="log", xlabel=r"index $i$", ylabel=r"$\sigma_i(A)$ / bulk edge",
           title=f"$T = {T}$")
    plain_log_ticks(ax)
    shared_legend(fig, ncol=3)
    return fig


def width_figure(width: pd.DataFrame, labels, curves):
    """sr(X_1 X_1^T) against T, one panel per mask, one band (mean +- 1.96 std over seeds)
    per map: which removal restores rank in width under which mask.

    Parameters
    ----------
    width : DataFrame
        `MaskedWidth.width`.
    labels : dict
        {mask name: its label}, one panel each, in order.
    curves : dict
        {variant: line keywords, "label" included}.

    Examples
    --------
    >>> width = pd.DataFrame({"mask": "causal", "variant": "softmax", "T": [8, 16, 8, 16],
    ...                       "seed": [0, 0, 1, 1], "gram_stable_rank": [1.0, 2.0, 3.0, 4.0]})
    >>> fig = width_figure(width, {"causal": "causal"}, {"softmax": {"label": "A"}})
    >>> fig.axes[0].get_lines()[0].get_ydata().tolist()
    [2.0, 3.0]
    """
    from .plotting import band, loglog_ticks, panels, shared_legend

    fig, axes = panels(len(labels), height=2.3, ncols=2, sharey=True)
    ticks = sorted(width["T"].unique())
    for k, (ax, (name, label)) in enumerate(zip(axes, dict(labels).items(), strict=True)):
        part = width[width["mask"] == name]
        for variant, style in curves.items():
            one = part[part["variant"] == variant].pivot(index="T", columns="seed",
                                                          values="gram_stable_rank")
            band(ax, one.index, one.to_numpy(), width=1.96, **style)
        loglog_ticks(ax, ticks)
        ax.set(title=label, xlabel="tokens $T$" if k >= len(axes) - 2 else None)
        if k % 2 == 0:
            ax.set_ylabel(r"$\mathrm{sr}(X_1X_1^\top)$")
    shared_legend(fig, ncol=3)
    return fig
