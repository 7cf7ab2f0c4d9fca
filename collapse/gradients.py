"""Exact gradient norms ||dX_L/dW_1||_F^2 of the Mind-the-Gap stack (rebuttal Fig. VIII).

W_1 is the first layer's value matrix, X_L the output of layer L (gap.py's model:
X_l = A_l X_{l-1} W_l, optional skip and LayerNorm, optional fix A -> A - 11^T/T).
The Jacobian has (T d) x d^2 entries, so it is never materialised at scale:

* Markov (input-independent) A, no skip, no LN: X_L = P (C W_1) Q with C = A_1 X_0,
  P = A_L...A_2 and Q = W_2...W_L is bilinear, its Jacobian a Kronecker product, and
  ||J||_F^2 = ||A_L...A_1 X_0||_F^2 ||W_2...W_L||_F^2            (`closed_form_plain`)
* Markov A with skip, no LN: X_L is still affine in W_1; expanding
  prod_l (I + W_l^T (x) A_l) over the subsets S of layers {2..L},
  ||J||_F^2 = sum_{S,S'} <A_S C, A_S' C>_F <W_S, W_S'>_F          (`closed_form_skip`),
  the sum of the elementwise product of two 2^(L-1) x 2^(L-1) Gram matrices.
* anything else (LayerNorm, key-query A(X)): exact reverse-mode autograd, the sum of
  squared vector-Jacobian products over the T d output entries, batched with
  torch.func.vmap(vjp) over chunks of one-hot cotangents (`autograd_norm`).

Networks are drawn exactly as `gap.simulate` draws them (same generator streams), so
the gradients belong to the same networks as that module's stable ranks. Everything
is float64: the unscaled N(0, 1) value weights overflow float32 within ~9 layers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy import stats

from . import gap, rng
from .attention import remove_outlier
from .checks import ParameterError, check_int
from .fit import loglog_fit

__all__ = [
    "Network",
    "draw",
    "forward",
    "closed_form_plain",
    "closed_form_skip",
    "autograd_norm",
    "jacobian_norm",
    "exact_norms",
    "exactness",
    "frozen_attention",
    "VARIANTS",
    "norm_grid",
    "fit_table",
    "fix_effect",
    "autograd_flops",
    "KIND_NAMES",
    "VARIANT_SUFFIXES",
    "config_name",
    "named",
    "effect_interval",
    "norm_curve",
    "norm_panels",
]


@dataclass
class Network:
    """One drawn stack per seed, batched over seeds (leading dim S).

    X0: (S, T, d); W: L tensors (S, d, d); A: L tensors (S, T, T), each layer's raw
    attention map (before the fix) on the forward pass; for key-query attention QK holds
    each layer's draws {"W_Q", "W_K"}, each (S, d, d), so A(X) can be re-evaluated at other X.
    """

    config: gap.GapConfig
    seeds: tuple[int, ...]
    X0: torch.Tensor
    W: list[torch.Tensor]
    A: list[torch.Tensor]
    QK: list[dict[str, torch.Tensor]] | None

    @property
    def depth(self) -> int:
        return len(self.W)

    def to(self, device) -> Network:
        """The same network on another device (draws always happen on the CPU)."""
        move = lambda t: t.to(device)  # noqa: E731
        QK = None if self.QK is None else [{k: move(v) for k, v in qk.items()} for qk in self.QK]
        return Network(
            self.config,
            self.seeds,
            move(self.X0),
            [move(w) for w in self.W],
            [move(a) for a in self.A],
            QK,
        )

    def attention(self, layer: int, X: torch.Tensor) -> torch.Tensor:
        """Layer `layer`'s (0-based) attention at input X: fixed for Markov/identity, A(X)
        otherwise."""
        if self.QK is None:
            return self.A[layer]
        return gap.config_attention(self.config, X, self.QK[layer], layer + 1)


def _draw_one(config: gap.GapConfig, seed: int):
    """One seed's X_0 and layers, drawn as gap.simulate draws them (the same stream, order and
    maps)."""
    X0, g = gap.input_and_generator(config, seed)
    second = gap.second_map_generator(seed)
    X, W, A, QK = X0, [], [], []
    for layer in range(1, config.n_layers + 1):
        draws = gap.layer_draws(
            config.attention, g, config.T, config.d, maps=(config.map,), second=second
        )
        A.append(gap.config_attention(config, X, draws, layer))
        W.append(draws["W"])
        if config.attention in gap.KEYQUERY:
            QK.append({k: draws[k] for k in ("W_Q", "W_K")})
        X = gap.gap_layer(X, A[-1], W[-1], config)
    return X0, W, A, QK


def draw(config: gap.GapConfig, seeds: int | Sequence[int] = 0) -> Network:
    """The networks of `gap.simulate(config, seeds)`: same X_0, attention and W_l for each seed.

    A network of depth L is the first L layers of any deeper one with the same seed,
    so one draw at the largest depth serves every smaller depth.
    """
    seeds = rng.check_seeds(seeds)
    parts = [_draw_one(config, s) for s in seeds]
    stack = lambda items: torch.stack(list(items))  # noqa: E731
    X0 = stack(p[0] for p in parts)
    layers = range(config.n_layers)
    W = [stack(p[1][i] for p in parts) for i in layers]
    A = [stack(p[2][i] for p in parts) for i in layers]
    QK = None
    if config.attention in gap.KEYQUERY:
        QK = [{k: stack(p[3][i][k] for p in parts) for k in ("W_Q", "W_K")} for i in layers]
    return Network(config, tuple(seeds), X0, W, A, QK)


def _check_depth(net: Network, depth: int | None) -> int:
    depth = net.depth if depth is None else check_int("depth", depth, minimum=1)
    if depth > net.depth:
        raise ParameterError(
            f"depth must be at most the network's {net.depth} layers, got {depth}"
        )
    return depth


def forward(net: Network, W1: torch.Tensor, depth: int | None = None) -> torch.Tensor:
    """X_depth as a function of the first layer's value weights W1 (S, d, d); all else fixed."""
    X = net.X0
    for layer in range(_check_depth(net, depth)):
        W = W1 if layer == 0 else net.W[layer]
        X = gap.gap_layer(X, net.attention(layer, X), W, net.config)
    return X


def _structured(net: Network, skip: bool) -> list[torch.Tensor]:
    """Attention matrices with the fix applied, after checking the closed form applies."""
    c = net.config
    if c.attention not in ("markov", "identity") or c.layernorm or c.skip != skip:
        raise ParameterError(
            f"this closed form needs Markov or identity attention, no LayerNorm and skip={skip}; "
            f"got {c.label}"
        )
    return [remove_outlier(a) if c.fix else a for a in net.A]


def closed_form_plain(net: Network) -> torch.Tensor:
    """||dX_l/dW_1||_F^2 for every depth l = 1..L, shape (L, S): Markov A, no skip, no LN.

    ||A_l...A_1 X_0||_F^2 ||W_2...W_l||_F^2 (an empty product of W is I_d, norm^2 d).
    """
    A = _structured(net, skip=False)
    P, Q = (
        A[0] @ net.X0,
        torch.eye(net.config.d, dtype=net.X0.dtype, device=net.X0.device).expand_as(net.W[0]),
    )
    out = [P.square().sum((-2, -1)) * Q.square().sum((-2, -1))]
    for layer in range(1, net.depth):
        P, Q = A[layer] @ P, Q @ net.W[layer]
        out.append(P.square().sum((-2, -1)) * Q.square().sum((-2, -1)))
    return torch.stack(out)


def _gram(M: torch.Tensor) -> torch.Tensor:
    """Frobenius inner products <M_i, M_j> over the subset dim 0 of M (n, S, a, b) -> (S, n, n)."""
    flat = M.flatten(-2).transpose(0, 1)  # (S, n, a*b)
    return flat @ flat.transpose(-1, -2)


def closed_form_skip(net: Network, *, max_bytes: float = 2e8) -> torch.Tensor:
    """||dX_l/dW_1||_F^2 for every depth l = 1..L, shape (L, S): Markov A with skip, no LN.

    dX_L = sum over subsets S of {2..L} of A_S C dW_1 W_S (C = A_1 X_0, A_S the ordered
    product of the A_l in S, later layers on the left; W_S likewise, on the right), so
    ||J||^2 = sum_{S,S'} <A_S C, A_S' C> <W_S, W_S'>. The 2^(l-1) products are built by
    doubling, one layer at a time; seeds are processed in chunks of at most `max_bytes`.
    """
    A = _structured(net, skip=True)
    S, T, d = net.X0.shape
    per_seed = 2 ** (net.depth - 1) * (T * d + d * d) * net.X0.element_size() * 2
    step = max(1, int(max_bytes // per_seed))
    chunks = []
    for lo in range(0, S, step):
        sl = slice(lo, lo + step)
        AS = (A[0][sl] @ net.X0[sl])[None]  # (subsets, seeds, T, d)
        WS = torch.eye(d, dtype=net.X0.dtype, device=net.X0.device).expand(1, AS.shape[1], d, d)
        out = [(_gram(AS) * _gram(WS)).sum((-2, -1))]
        for layer in range(1, net.depth):
            AS = torch.cat([AS, A[layer][sl] @ AS])
            WS = torch.cat([WS, WS @ net.W[layer][sl]])
            out.append((_gram(AS) * _gram(WS)).sum((-2, -1)))
        chunks.append(torch.stack(out))
    return torch.cat(chunks, dim=1)


def _auto_chunk(net: Network) -> int:
    """Cotangents per vmap batch: the backward holds ~8 (T, max(T, d)) tensors per layer and
    cotangent.

    Small batches (tens of MB on a CPU) keep the working set in cache; a GPU gets GBs.
    """
    T, d = net.X0.shape[-2:]
    per = 8 * T * max(T, d) * net.X0.element_size() * max(net.depth, 1)
    budget_bytes = 8e9 if net.X0.is_cuda else 5e7
    return max(1, min(T * d, max(32, int(budget_bytes // per))))


def _one_seed(net: Network, s: int) -> Network:
    """Seed s of a batched network, with 2-D tensors."""
    QK = None if net.QK is None else [{k: v[s] for k, v in qk.items()} for qk in net.QK]
    return Network(
        net.config, (net.seeds[s],), net.X0[s], [w[s] for w in net.W], [a[s] for a in net.A], QK
    )


def autograd_norm(
    net: Network, depth: int | None = None, *, chunk: int | None = None
) -> torch.Tensor:
    """||dX_depth/dW_1||_F^2 per seed, shape (S,), by exact reverse-mode autograd.

    Per seed: one forward pass, then torch.func.vmap over the vjp for chunks of one-hot
    cotangents (the T d output entries). Each seed runs with 2-D weights, so that the
    batched cotangents fold into large matrix products (X @ W with a 2-D W is one GEMM
    over all cotangents), about 4x faster on a CPU than batching seeds as well, which
    turns every product into many tiny ones. Works for every configuration, including
    LayerNorm and key-query A(X).
    """
    depth = _check_depth(net, depth)
    S, T, d = net.X0.shape
    chunk = _auto_chunk(net) if chunk is None else check_int("chunk", chunk, minimum=1)
    totals = []
    for s in range(S):
        one = _one_seed(net, s)
        _, vjp_fn = torch.func.vjp(lambda w, one=one: forward(one, w, depth), one.W[0])
        batched = torch.func.vmap(vjp_fn)
        total = torch.zeros((), dtype=net.X0.dtype, device=net.X0.device)
        for lo in range(0, T * d, chunk):
            n = min(chunk, T * d - lo)
            cot = torch.zeros(n, T * d, dtype=net.X0.dtype, device=net.X0.device)
            cot[torch.arange(n), torch.arange(lo, lo + n)] = 1.0
            (grads,) = batched(cot.reshape(n, T, d))
            total = total + grads.square().sum()
        totals.append(total)
    return torch.stack(totals)


def jacobian_norm(net: Network, depth: int | None = None) -> torch.Tensor:
    """Reference: ||J||_F^2 per seed from the fully materialised Jacobian (small T and d only)."""
    depth = _check_depth(net, depth)
    J = torch.autograd.functional.jacobian(
        lambda w: forward(net, w, depth), net.W[0]
    )  # (S, T, d, S, d, d)
    S = net.X0.shape[0]
    return torch.stack([J[s, :, :, s].square().sum() for s in range(S)])


def exact_norms(
    net: Network, depths: Sequence[int] | None = None, *, chunk: int | None = None
) -> torch.Tensor:
    """||dX_l/dW_1||_F^2 at each depth in `depths` (default all), shape (len(depths), S).

    Uses the closed forms where they apply (Markov or identity attention without
    LayerNorm), exact autograd everywhere else.
    """
    depths = (
        list(range(1, net.depth + 1)) if depths is None else [_check_depth(net, L) for L in depths]
    )
    c = net.config
    if c.attention in ("markov", "identity") and not c.layernorm:
        every = closed_form_skip(net) if c.skip else closed_form_plain(net)
        return every[[L - 1 for L in depths]]
    return torch.stack([autograd_norm(net, L, chunk=chunk) for L in depths])


def exactness(config: gap.GapConfig, seeds: Sequence[int]) -> float:
    """Largest relative gap, over the depths 1..config.n_layers and the seeds, between
    `exact_norms` and the norm of the whole Jacobian (`jacobian_norm`): how exact the
    closed forms and the batched autograd are, checked against the slow definition."""
    net = draw(config, seeds)
    ours = exact_norms(net)
    reference = torch.stack([jacobian_norm(net, L) for L in range(1, config.n_layers + 1)])
    return ((ours - reference).abs() / reference).max().item()


def frozen_attention(net: Network) -> Network:
    """The same network with every attention matrix held at its forward-pass value.

    Why: for key-query A(X), dX_L/dW_1 has a value path (through A_l X W_l with A_l
    fixed) and an attention path (through dA_l/dX); the fix A - 11^T/T changes A but
    not its derivative. The frozen copy isolates the value path, and the Markov closed
    forms then apply to it.
    """
    config = dataclasses.replace(net.config, attention="markov")
    return Network(config, net.seeds, net.X0, list(net.W), list(net.A), None)


def autograd_flops(T: int, d: int, depth: int, n_seeds: int, keyquery: bool) -> float:
    """Rough float64 FLOP count of `autograd_norm`, for the notebooks' ETA: T d cotangents per
    seed, each a backward pass (~2x a forward) through layers 2..depth (6 T d^2 + 4 T^2 d per
    key-query layer, 2 T d^2 + 2 T^2 d per fixed-attention layer) plus C^T G at layer 1."""
    layer = (6 * T * d * d + 4 * T * T * d) if keyquery else (2 * T * d * d + 2 * T * T * d)
    return float((2 * layer * (depth - 1) + 2 * T * d * d) * T * d * n_seeds)


VARIANTS = {
    "plain": (False, False),
    "skip": (True, False),
    "ln": (False, True),
    "skip_ln": (True, True),
}


def norm_grid(
    kinds,
    variants,
    Ts,
    depths,
    seeds,
    *,
    fixes=(False, True),
    frozen: bool = False,
    device=None,
    map: str = "softmax",
    lam: float | None = None,
) -> pd.DataFrame:
    """||dX_L/dW_1||_F^2 over a grid, as a tidy DataFrame (one row per kind, variant, fix, T, L,
    seed).

    d = T throughout (the paper's setting). One network of depth max(depths) per
    (kind, variant, fix, T) serves every depth. frozen=True holds every attention
    matrix at its forward value (`frozen_attention`): the value path alone. map, lam:
    the attention map of every network (`gap.GapConfig`; fixes must be (False,) for any
    map but softmax). Columns: kind, variant, fix, T, L, seed, norm, log_norm, method.
    """
    depths, seeds = sorted(depths), list(seeds)
    rows = []
    for kind in kinds:
        for variant in variants:
            skip, layernorm = VARIANTS[variant]
            for fix in fixes:
                for T in Ts:
                    config = gap.GapConfig(
                        T=T,
                        d=T,
                        n_layers=depths[-1],
                        attention=kind,
                        fix=fix,
                        skip=skip,
                        layernorm=layernorm,
                        map=map,
                        lam=lam,
                    )
                    net = draw(config, seeds)
                    net = (frozen_attention(net) if frozen else net).to(device)
                    closed = net.config.attention in ("markov", "identity") and not layernorm
                    norms = exact_norms(net, depths).cpu().numpy()
                    for i, L in enumerate(depths):
                        for j, s in enumerate(seeds):
                            rows.append(
                                (
                                    kind,
                                    variant,
                                    bool(fix),
                                    T,
                                    L,
                                    s,
                                    norms[i, j],
                                    "closed form" if closed else "autograd",
                                )
                            )
    frame = pd.DataFrame(
        rows, columns=["kind", "variant", "fix", "T", "L", "seed", "norm", "method"]
    )
    with np.errstate(divide="ignore"):
        frame.insert(7, "log_norm", np.log(frame["norm"].to_numpy()))
    return frame


def fit_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (kind, variant, fix, L): the slope of the seed-mean log||J||^2 against log T, and
    the seed-mean log||J||^2 at each T (columns "log T=<T>"). Non-finite logs (a norm of
    exactly 0, as A-perp X can be) are left out of the means and counted in "n_zero"."""
    finite = frame[np.isfinite(frame["log_norm"])]
    means = finite.groupby(["kind", "variant", "fix", "L", "T"])["log_norm"].mean().unstack("T")
    slope = loglog_fit(means.columns.to_numpy(), np.exp(means.to_numpy().T)).slope
    table = means.rename(columns=lambda T: f"log T={T}")
    table.insert(0, "slope", slope)
    zeros = (
        (~np.isfinite(frame["log_norm"]))
        .groupby([frame[k] for k in ["kind", "variant", "fix", "L"]])
        .sum()
    )
    table.insert(1, "n_zero", zeros.reindex(table.index).to_numpy())
    return table


def _mean_ci(x: np.ndarray, level: float) -> tuple[float, float, float, float]:
    """(mean, low, high, std) of a sample: its Student-t interval at `level`; NaN below 2."""
    if x.size < 2:
        return (math.nan,) * 4
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1)) * sd / math.sqrt(x.size)
    return mean, mean - half, mean + half, sd


def fix_effect(frame: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Per (kind, variant, L), what the fix does to log||J||^2 over the paired seeds.

    Why per seed: a seed draws the same X_0 and weights with and without the fix, so each
    seed gives its own slope without the fix and its own drop of the slope; their mean is
    the slope of the seed-mean of log||J||^2 (a least-squares slope is linear in the data,
    so this agrees with `fit_table`), and their spread gives a Student-t interval at
    `level` that decides a verdict without depending on the seeds drawn.

    frame: a `norm_grid` with both fixes. Columns: "slope", "slope low", "slope high",
    "slope sd" (the slope of log||J||^2 against log T without the fix: mean over seeds,
    interval, seed-to-seed std); "drop", "drop low", "drop high", "drop sd" (that slope
    minus the slope with the fix); "level drop" (the smallest over T of the seed-mean of
    log||J||^2 without minus with the fix), "level drop sd" (the seed-to-seed std of that
    difference at the same T); "n_seeds". A seed with a non-finite log-norm (a norm of
    exactly 0) in either arm is left out.
    """
    rows = {}
    for key, sub in frame.groupby(["kind", "variant", "L"], sort=False):
        logs = sub.pivot_table(index="seed", columns=["fix", "T"], values="log_norm")
        if set(logs.columns.get_level_values("fix")) != {False, True}:
            raise ParameterError("fix_effect needs the grid with and without the fix")
        logs = logs[np.isfinite(logs.to_numpy()).all(axis=1)]
        x = np.log(logs[False].columns.to_numpy(dtype=float))
        slopes = {f: np.polyfit(x, logs[f].to_numpy().T, 1)[0] for f in (False, True)}
        gaps = logs[False] - logs[True]  # (seed, T)
        worst = gaps.mean().idxmin()
        slope, drop = (_mean_ci(s, level) for s in (slopes[False], slopes[False] - slopes[True]))
        rows[key] = {
            **dict(zip(["slope", "slope low", "slope high", "slope sd"], slope, strict=True)),
            **dict(zip(["drop", "drop low", "drop high", "drop sd"], drop, strict=True)),
            "level drop": float(gaps[worst].mean()),
            "level drop sd": float(gaps[worst].std(ddof=1)) if len(gaps) > 1 else math.nan,
            "n_seeds": len(logs),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    return table.rename_axis(["kind", "variant", "L"])


# Reading the grid on the page: names, intervals and the figure of ||J||^2 against T.

KIND_NAMES = {  # MyST math on the page and matplotlib's mathtext in figures read these alike
    "markov": "Markov $A$",
    "normal": "$A(X)$, $N(0,1)$ $W_Q, W_K$",
    "xavier": "$A(X)$, Xavier $W_Q, W_K$",
}
_SYMBOLS = {"markov": "A", "normal": "A(X)", "xavier": "A(X)"}  # TeX, without the dollars
VARIANT_SUFFIXES = {"plain": "", "skip": "+skip", "ln": "+LN", "skip_ln": "+skip+LN"}
_TITLES = {"plain": "no skip", "skip": "skip", "ln": "LN", "skip_ln": "skip and LN"}


def config_name(kind: str, variant: str, fix: bool = False) -> str:
    r"""The attention, fixed or not, and the variant, in math: how the page names a stack.

    Examples
    --------
    >>> config_name("markov", "skip", True), config_name("normal", "ln")
    ('$A^\\perp$+skip', '$A(X)$+LN')
    """
    return "$" + _SYMBOLS[kind] + (r"^\perp" if fix else "") + "$" + VARIANT_SUFFIXES[variant]


def named(frame: pd.DataFrame) -> pd.DataFrame:
    """A table with columns (or index levels) kind, variant and fix, with two columns added as
    the page names them: "attention" (`KIND_NAMES`) and "configuration" (`config_name`)."""
    rows = frame.reset_index() if "kind" in frame.index.names else frame.copy()
    rows["attention"] = rows["kind"].map(KIND_NAMES)
    keys = rows[["kind", "variant", "fix"]].itertuples(index=False)
    rows["configuration"] = [config_name(k, v, f) for k, v, f in keys]
    return rows


def effect_interval(row, column: str) -> str:
    """'[0.12, 0.53]': a `fix_effect` row's interval of `column`, for a table or a sentence.

    Examples
    --------
    >>> effect_interval({"drop low": 0.123, "drop high": 0.531}, "drop")
    '[0.12, 0.53]'
    """
    return f"[{row[column + ' low']:.2f}, {row[column + ' high']:.2f}]"


def norm_curve(frame: pd.DataFrame, **selection) -> pd.DataFrame:
    """||J||^2 of one configuration of a `norm_grid` frame as a (T, seed) table."""
    rows = frame.loc[np.logical_and.reduce([frame[k] == v for k, v in selection.items()])]
    return rows.pivot(index="T", columns="seed", values="norm")


def _norm_panel(ax, frame, kind, variant, depths) -> None:
    from .plotting import COLORS, band

    for i, L in enumerate(depths):
        for fix, ls in [(False, "-"), (True, "--")]:
            c = norm_curve(frame, kind=kind, variant=variant, fix=fix, L=L)
            band(ax, c.index, c.to_numpy(), log=True, width=1.96, color=COLORS[i], ls=ls,
                 label=f"$L = {L}$, " + ("with the fix" if fix else "no fix"))
        c = norm_curve(frame, kind=kind, variant=variant, fix=False, L=L)
        ax.plot(c.index, np.exp(np.log(c.iloc[0]).mean()) * (c.index / c.index[0]) ** (L - 1),
                ":", color=COLORS[i], lw=1, label=f"$\\propto T^{{{L - 1}}}$")
    ax.set(xscale="log", yscale="log")


def norm_panels(frame: pd.DataFrame, kinds, variants, depths, Ts):
    """Log-log ||dX_L/dW_1||_F^2 against T = d, one row of panels per attention kind and one
    column per variant (rows of up to three for a single variant): no fix solid, the fix
    dashed, the reference T^(L-1) dotted, +-1.96 std bands of the log over seeds; one legend.

    Returns the figure.
    """
    from matplotlib.ticker import NullFormatter

    from .plotting import panels, shared_legend

    ncols = len(variants) if len(variants) > 1 else None
    fig, axes = panels(len(kinds) * len(variants), height=2.5, ncols=ncols)
    for (kind, variant), ax in zip([(k, v) for k in kinds for v in variants], axes, strict=True):
        _norm_panel(ax, frame, kind, variant, depths)
        ax.set_xticks(Ts, [str(t) for t in Ts], minor=False)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{KIND_NAMES[kind]}, {_TITLES[variant]}")
        ax.set_xlabel("tokens $T = d$")
        ax.set_ylabel(r"$\|\partial X_L / \partial W_1\|_F^2$")
    # one legend column per depth (matplotlib fills the columns first)
    shared_legend(fig, ncol=len(depths) if len(depths) > 1 else 3)
    return fig
