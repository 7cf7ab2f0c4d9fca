"""Mask design: the sparse attention of deployed models as a catalogue, their graphs at many
sizes, how the radius grows with N, and the measurements that compare their collapse.

Wu et al.'s rebuttal proposes Theorem 1's graph-dependent rate as a principle for mask
design. `CATALOGUE` names each deployed pattern with its model and the parameters used
here (token-level, scaled to sequences of 64 to 1024 tokens); `build` gives one period of
its per-layer masks (two for Swin's shifted windows, one otherwise). The graph functions
measure one period's composed graph; `graph_summary` also gives the radius in layers
(`radius_in_layers`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch
from scipy.sparse import csgraph, csr_matrix

from . import fit as _fit
from . import masks as _masks
from . import metrics as _metrics
from . import san as _san
from . import theory as _theory
from .checks import ParameterError, check_int

__all__ = [
    "Pattern",
    "CATALOGUE",
    "FAMILIES",
    "catalogue",
    "build",
    "stack",
    "radius_in_layers",
    "graph_summary",
    "graph_table",
    "GrowthFit",
    "radius_growth",
    "growth_table",
    "window_of_radius",
    "probe_patterns",
    "components",
    "component_spread",
    "run_components",
    "layer_states",
    "rank_agreement",
    "halving_depth",
    "collapse_table",
]


@dataclass(frozen=True)
class Pattern:
    """A deployed attention pattern: `masks.make(mask, n, **options)`, alternating with its
    shifted copy on every other layer when `shifted` (Swin); `model` names, briefly, the
    models that use it."""

    label: str
    model: str
    mask: str
    options: dict = field(default_factory=dict)
    shifted: bool = False

    @property
    def period(self) -> int:
        return 2 if self.shifted else 1

    def build(self, n: int) -> tuple[torch.Tensor, ...]:
        """One period of per-layer masks on n tokens."""
        first = _masks.make(self.mask, n, **self.options)
        if not self.shifted:
            return (first,)
        return first, _masks.make(self.mask, n, **self.options, shift=True)


CATALOGUE: dict[str, Pattern] = {
    "complete": Pattern("complete", "BERT, ViT", "complete"),
    "causal": Pattern("causal", "GPT", "causal"),
    "sliding_window": Pattern(
        "sliding window", "Wu et al.", "sliding_window", {"window": 1}
    ),
    "mistral": Pattern(
        "causal sliding window", "Mistral 7B", "causal_sliding_window", {"window": 4}
    ),
    "streaming_llm": Pattern(
        "sink window", "StreamingLLM", "sink_window", {"window": 4, "n_sink": 4}
    ),
    "strided": Pattern("strided", "Sparse Transformer", "strided"),
    "sparse_fixed": Pattern(
        "Sparse fixed", "Sparse Transformer", "sparse_fixed", {"block": 16, "summary": 2}
    ),
    "longformer": Pattern("Longformer", "Longformer", "longformer", {"window": 4, "n_global": 1}),
    "longformer_local": Pattern(
        "Longformer, no global", "Longformer", "longformer", {"window": 4, "n_global": 0}
    ),
    "longformer_dilated": Pattern(
        "Longformer, dilated",
        "Longformer",
        "longformer",
        {"window": 4, "n_global": 0, "dilation": 2},
    ),
    "longformer_dilated_global": Pattern(
        "Longformer, dilated + global",
        "Longformer",
        "longformer",
        {"window": 4, "n_global": 1, "dilation": 2},
    ),
    "bigbird": Pattern(
        "BigBird", "BigBird", "bigbird", {"window": 1, "n_global": 2, "n_random": 3, "seed": 0}
    ),
    "neighborhood": Pattern(
        "neighborhood (2-D)", "NAT", "neighborhood_2d", {"kernel": 7}
    ),
    "slide": Pattern("Slide (2-D)", "Slide-Transformer", "slide_2d", {"kernel": 3}),
    "swin": Pattern("Swin, no shift", "Swin", "swin_2d", {"window": 4}),
    "swin_shifted": Pattern(
        "Swin, shifted", "Swin", "swin_2d", {"window": 4}, shifted=True
    ),
}


# The catalogue's patterns by family, as a figure groups them: dense, global, sink and
# strided patterns; 1-D local windows; 2-D windows.
FAMILIES = (
    ("complete", "causal", "streaming_llm", "strided", "sparse_fixed", "longformer",
     "longformer_dilated_global", "bigbird"),
    ("sliding_window", "mistral", "longformer_local", "longformer_dilated"),
    ("neighborhood", "slide", "swin", "swin_shifted"),
)


def catalogue(seed: int = 0) -> dict[str, Pattern]:
    """`CATALOGUE` with BigBird's random keys drawn from `seed` (a run's first seed), so
    that another family of seeds draws other keys.

    Examples
    --------
    >>> catalogue(7)["bigbird"].options["seed"], CATALOGUE["bigbird"].options["seed"]
    (7, 0)
    """
    bigbird = CATALOGUE["bigbird"]
    return CATALOGUE | {"bigbird": replace(bigbird, options=bigbird.options | {"seed": seed})}


def build(pattern: str | Pattern, n: int) -> tuple[torch.Tensor, ...]:
    """One period of a catalogue pattern (by name) or of any Pattern, on n tokens."""
    if isinstance(pattern, str):
        if pattern not in CATALOGUE:
            raise ParameterError(f"pattern must be one of {', '.join(CATALOGUE)}; got {pattern!r}")
        pattern = CATALOGUE[pattern]
    return pattern.build(n)


def stack(periods: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """Per-layer masks for a batch of patterns: element l stacks every pattern's mask of layer
    l, over the least common multiple of their periods, for `san.simulate(mask=...)`.

    Why: simulate cycles one list of (..., n, n) masks over layers; patterns of period 1
    and 2 share one batched run when each is repeated to the common period.
    """
    if not periods:
        raise ParameterError("periods must hold at least one pattern's masks")
    period = math.lcm(*(len(p) for p in periods))
    return [torch.stack([p[layer % len(p)] for p in periods]) for layer in range(period)]


def radius_in_layers(mask) -> int | float:
    """The radius of a mask, or of a sequence of masks cycled over layers, counted in layers:
    the fewest layers r such that every r consecutive layers, from any layer of the period
    on, carry some token (a center) to every token; math.inf without a center.

    Why: Theorem 1's constant r for a cycled sequence. Counting whole periods (radius of the
    composed graph x period) overcounts: a path can end in the middle of a period (Swin's
    shifted windows at N = 256: 3 periods, but 5 layers from the first layer on, and 4 from
    the second). A single mask gives its radius.
    """
    sequence = _masks.as_sequence(mask)
    return _radius_in_layers(sequence, _masks.radius(list(sequence)))


def _radius_in_layers(sequence, periods) -> int | float:
    """radius_in_layers, given the radius of the composed graph in periods."""
    if len(sequence) == 1 or not math.isfinite(periods):
        return periods
    p, n = len(sequence), sequence[0].shape[-1]
    # sparse products: the masks of deployed patterns allow a few keys per query
    layers_of = [csr_matrix(m.cpu().numpy().astype(np.float32)) for m in sequence]
    # from any phase, p - 1 layers then `periods` whole periods reach every token
    longest = periods * p + p - 1
    found = []
    for phase in range(p):
        reach = np.eye(n, dtype=np.float32)  # reach[i, j]: token j has reached token i
        for layers in range(1, longest + 1):
            reach = (layers_of[(phase + layers - 1) % p] @ reach > 0).astype(np.float32)
            if reach.all(axis=0).any():  # column j all True: token j reaches every token
                found.append(layers)
                break
    return max(found)


def graph_summary(mask) -> dict:
    """Radius, diameter, number of centers and connectivity of one mask, or of one period of
    a list of masks, from one distance computation; `radius_layers` counts the radius in
    layers (`radius_in_layers`), the constant r of Theorem 1 for a cycled sequence."""
    period = len(_masks.as_sequence(mask))
    dist = _masks.distances(mask)
    eccentricity = dist.max(axis=1)
    finite = np.isfinite(eccentricity)
    radius = int(eccentricity[finite].min()) if finite.any() else math.inf
    layers = _radius_in_layers(_masks.as_sequence(mask), radius)
    return {
        "radius": radius,
        "radius_layers": layers,
        "diameter": int(dist.max()) if np.isfinite(dist).all() else math.inf,
        "centers": int(finite.sum()),
        "quasi_strongly_connected": bool(finite.any()),
        "strongly_connected": bool(np.isfinite(dist).all()),
        "period": period,
    }


def graph_table(patterns: Mapping[str, Pattern], ns: Sequence[int]) -> pd.DataFrame:
    """graph_summary of every pattern at every n: one row per (pattern, n)."""
    rows = [
        {"pattern": name, "n": int(n), **graph_summary(list(pattern.build(int(n))))}
        for name, pattern in patterns.items()
        for n in ns
    ]
    return pd.DataFrame(rows)


class GrowthFit(NamedTuple):
    """radius ~ N^exponent fitted on log-log axes; `law` the nearest of constant (0),
    square root (1/2) and linear (1); r2 NaN for a constant radius."""

    exponent: float
    r2: float
    law: str


_LAWS = {0.0: "constant", 0.5: "square root of N", 1.0: "linear in N"}


def radius_growth(ns, radii) -> GrowthFit:
    """How a family's radius grows with N: the power-law exponent of radius against N.

    Why: a window of fixed width has r ~ N / w, a 2-D window r ~ sqrt(N) / kernel, a
    global token r = 1; the exponent tells the families apart without a guess of the
    law's constant. Infinite radii (no center) give NaN.
    """
    radii = np.asarray(radii, dtype=float)
    if not np.all(np.isfinite(radii)):
        return GrowthFit(math.nan, math.nan, "no center")
    result = _fit.loglog_fit(ns, radii)
    exponent = 0.0 if np.ptp(radii) == 0 else float(result.slope)
    law = _LAWS[min(_LAWS, key=lambda p: abs(p - exponent))]
    return GrowthFit(exponent, float(result.r2), law)


def growth_table(graphs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """How each pattern's radius grows with N, from `graph_table`'s rows.

    Returns
    -------
    by_n : DataFrame
        The radius in layers, one row per pattern (in the table's order), one column per N
        (increasing).
    growth : DataFrame
        `radius_growth` of each row: columns exponent, r2 and law.
    """
    order = list(dict.fromkeys(graphs["pattern"]))
    by_n = graphs.pivot(index="pattern", columns="n", values="radius_layers").loc[order]
    fits = [radius_growth(list(by_n.columns), by_n.loc[m]) for m in order]
    return by_n, pd.DataFrame(fits, index=by_n.index)


def window_of_radius(n: int, r: int) -> int:
    """The narrowest half-width w whose sliding window on n tokens has radius r (or less).

    Why: a mask whose rate is compared with a window's needs the window of the same
    radius; the radius of a sliding window is ceil(floor(n / 2) / w).
    """
    n, r = check_int("n", n, minimum=2), check_int("r", r, minimum=1)
    return math.ceil((n // 2) / r)


_PROBE_KINDS = (("sink", "sink_window", "n_sink"), ("global", "longformer", "n_global"))


def probe_patterns(windows, deployed: Mapping[str, Pattern]) -> tuple[dict, dict]:
    """The patterns that probe the single-token claims: beside a window of each width, one
    sink (`sink_window`) and one global token (`longformer`).

    Why: a probe that is also a deployed pattern (Longformer's window of 4 with one global
    token) is named by that pattern and not run twice.

    Parameters
    ----------
    windows : sequence of int
        The window widths w.
    deployed : dict
        {name: Pattern}, the patterns already run.

    Returns
    -------
    probes : dict
        {(kind, w): the name of its pattern}, kind "sink" or "global".
    extra : dict
        {name: Pattern} of the probes no deployed pattern covers ("sink_w2"), labelled
        "one sink, $w = 2$".

    Examples
    --------
    >>> probes, extra = probe_patterns([4], CATALOGUE)
    >>> probes, list(extra)
    ({('sink', 4): 'sink_w4', ('global', 4): 'longformer'}, ['sink_w4'])
    """
    probes, extra = {}, {}
    for w in windows:
        for kind, mask, count in _PROBE_KINDS:
            options = {"window": w, count: 1}
            same = [m for m, p in deployed.items() if (p.mask, p.options) == (mask, options)]
            name = same[0] if same else f"{kind}_w{w}"
            if not same:
                extra[name] = Pattern(f"one {kind}, $w = {w}$", "probe", mask, options)
            probes[(kind, w)] = name
    return probes, extra


def components(mask) -> np.ndarray:
    """Label of each token's strongly connected component in one period's composed graph."""
    graph = csr_matrix(_masks.compose(mask).cpu().numpy().T)
    return csgraph.connected_components(graph, directed=True, connection="strong")[1]


def component_spread(X: torch.Tensor, labels) -> tuple[torch.Tensor, torch.Tensor]:
    """(within, between) for tokens X (..., n, d) split into components by `labels`:
    within^2 = sum over components of mu(X_c)^2, between^2 = sum_c n_c ||mean_c - mean||^2,
    so that within^2 + between^2 = mu(X)^2.

    Why: without a center the tokens can merge within each component only; between
    measures how far apart the components' points stay.
    """
    X = X.to(torch.float64)
    labels = torch.as_tensor(np.asarray(labels), dtype=torch.long, device=X.device)
    onehot = torch.nn.functional.one_hot(labels).to(X)  # (n, components)
    counts = onehot.sum(0)
    means = (onehot.T @ X) / counts[:, None]  # (..., components, d)
    within = torch.linalg.norm(X - onehot @ means, dim=(-2, -1))
    centred = means - X.mean(dim=-2, keepdim=True)
    between = (counts * (centred**2).sum(-1)).sum(-1).sqrt()
    return within, between


def run_components(X0, config, mask, seeds, d_qk: float) -> dict[str, np.ndarray]:
    """Per-layer mu, within and between (component_spread) of one pattern's run, (L+1, seed).

    X0 (seeds, n, d); the network is the one `san.simulate(X0, config, mask=mask,
    d_qk=d_qk, seed=seeds)` draws, so `mu` equals simulate's.
    """
    sequence = _masks.as_sequence(mask)
    labels = components(list(sequence))
    history = [(_metrics.mu(X0), *component_spread(X0, labels))]
    X = X0
    for layer, w in enumerate(_san.init_layers(config, list(seeds), dtype=X0.dtype)):
        X, _ = _san.apply_layer(
            X, w, config, sequence[layer % len(sequence)], d_qk**0.5, weights=False
        )
        history.append((_metrics.mu(X), *component_spread(X, labels)))
    stacked = torch.stack([torch.stack(h) for h in history]).numpy()  # (L+1, 3, seed)
    return dict(zip(("mu", "within", "between"), stacked.transpose(1, 0, 2), strict=True))


def layer_states(X0, config, mask, seeds, d_qk: float) -> torch.Tensor:
    """Every layer's tokens of the network `san.simulate(X0, config, mask=mask, d_qk=d_qk,
    seed=seeds)` draws, (L+1, seed, n, d): to measure parts of the sequence, which
    simulate does not record. Small runs only: it keeps every layer.
    """
    X, states = X0, [X0]
    for w in _san.init_layers(config, seeds):
        X, _ = _san.apply_layer(X, w, config, mask, math.sqrt(d_qk))
        states.append(X)
    return torch.stack(states)


def rank_agreement(x, y, *, n_perm: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Kendall's tau-b between x and y (ties in either allowed) and its one-sided
    permutation p-value: the share of random pairings of y with x whose tau-b is as large.

    Why: many masks share a radius (every global or sink pattern has r = 1), so the
    agreement of two orderings needs a tie-aware rank correlation, and with a dozen
    patterns its significance is read off exact random pairings, not a normal law.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 3:
        raise ParameterError(f"x and y must be 1-D of one length >= 3, got {x.shape}, {y.shape}")
    n_perm = check_int("n_perm", n_perm, minimum=1)
    upper = np.triu_indices(x.size, 1)
    sx = np.sign(x[:, None] - x[None, :])[upper]
    order = np.argsort(np.random.default_rng(seed).random((n_perm, x.size)), axis=1)
    ys = np.vstack([y, y[order]])  # (1 + n_perm, n): the observed pairing first
    sy = np.sign(ys[:, :, None] - ys[:, None, :])[:, upper[0], upper[1]]
    norm = math.sqrt((sx**2).sum() * (sy[0] ** 2).sum())
    if norm == 0:
        return math.nan, math.nan
    tau = (sy @ sx) / norm
    return float(tau[0]), float((1 + (tau[1:] >= tau[0] - 1e-12).sum()) / (1 + n_perm))


def halving_depth(mu) -> np.ndarray:
    """First layer t at which mu(t) / mu(0) <= 1/2 (NaN where it never gets there)."""
    return _fit.floor_layer(mu, floor=0.5)


def collapse_table(mu, eps, radii: pd.Series, *, depth: int) -> pd.DataFrame:
    """How each pattern of one batched run collapsed, one row per pattern: the numbers a
    designer compares, next to Theorem 1's bound for the pattern's radius.

    Parameters
    ----------
    mu : ndarray
        (L+1, seed, pattern), mu after every layer.
    eps : ndarray
        (seed, pattern), each run's smallest edge weight (`theory.run_epsilon`).
    radii : Series
        Each pattern's radius in layers, by name, in the run's order.
    depth : int
        The fixed depth of the column "at depth".

    Returns
    -------
    DataFrame
        Indexed like `radii`: radius; epsilon (smallest over seeds); bound (Theorem 1's
        slope with it, `theory.theorem1_slope`); tail (mean tail slope) and rate (its
        negative); at depth (mean log mu(depth) - log mu(0)); halving and floor (first
        layer at which every seed has mu / mu(0) <= 1/2, resp. below the fit cut; NaN when
        some seed never does); fall (smallest net fall of log mu over the seeds).
    """
    log_mu = np.log(np.maximum(mu, _metrics.MU_ZERO))  # mu = 0 exactly: just below the floor
    tail, eps_min = _fit.tail_slopes(mu).mean(0), eps.min(0)
    columns = {
        "radius": radii,
        "epsilon": eps_min,
        "bound": [_theory.theorem1_slope(e, r) for e, r in zip(eps_min, radii, strict=True)],
        "tail": tail,
        "rate": -tail,
        "at depth": (log_mu[depth] - log_mu[0]).mean(0),
        "halving": np.nanmax(halving_depth(mu), axis=0),
        "floor": _fit.floor_layer(mu).max(0),
        "fall": (log_mu[0] - log_mu[-1]).min(0),
    }
    return pd.DataFrame(columns, index=radii.index)
