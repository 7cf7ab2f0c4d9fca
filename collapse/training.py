"""Does the fix help training? A small attention-only regression.

The task follows the training script of the official Mind-the-Gap code (`losses.py`,
`model.py`, `atttention/*.py`, removed from the repository in commit 8efa84b): a stack of
`depth` attention-only layers X <- A X W_V W_h (one head, no skip, no LayerNorm, no MLP),
isometric inputs X (T x d), an entrywise target f(X) (Heaviside H(x), or the script's
default sigmoid(20 (x + 1/2))), MSE loss, Adam, one full batch of `n_samples` inputs,
`steps` steps. Value weights start N(0, 1) (unscaled, as in the official configs) and
the output weight W_h starts at the identity; both train. Attention is either
"markov", the official "constant" attention: a T x T matrix of logits per layer, drawn
N(-ln 2 / 2, ln 2) entrywise and turned into a Markov matrix by a row softmax, or
key-query attention softmax(X W_Q (X W_K)^T / sqrt(d)) with W_Q, W_K drawn Xavier
("xavier", std 1/sqrt(d)) or N(0, 1) ("normal"). The attention parameters (the logits,
or W_Q and W_K) train too, as in the official code (`attention_weights="trainable"`);
`attention_weights="frozen"` keeps them at their initial draw (for "markov": the fixed
random Markov matrix of the random-matrix model). The fix replaces every A by
A - (1/T) 1 1^T.

One call trains every (seed, learning rate, fix) combination at once: the models are
independent slices of batched tensors, and Adam (written out, elementwise) takes a
per-model learning rate. With the same seed, the fixed and unfixed models share
their data and their initial weights, so their comparison is paired.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy import stats

from . import gap, rng
from .checks import ParameterError, check_choice, check_float, check_int
from .markov import random_logits

__all__ = [
    "TrainConfig",
    "TARGETS",
    "KINDS",
    "VALUE_INITS",
    "ATTENTION_WEIGHTS",
    "target",
    "data",
    "constant_loss",
    "init_weights",
    "forward",
    "adam_step",
    "train",
    "model_bytes",
    "best_lr",
    "paired_ratio_ci",
    "train_flops",
    "run_grid",
    "summary",
    "benefit",
    "KIND_LABELS",
    "arm_name",
    "case_tick",
    "best_curves",
    "summary_table",
    "benefit_table",
    "benefit_text",
    "benefit_rows",
    "column_sum_spread",
]

KINDS = ("markov", "normal", "xavier")
TARGETS = ("heaviside", "sigmoid", "heaviside_centred")
VALUE_INITS = ("normal", "scaled")
ATTENTION_WEIGHTS = ("trainable", "frozen")
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class TrainConfig:
    """One training task; validated on construction."""

    T: int
    d: int
    depth: int
    attention: str = "normal"
    n_samples: int = 50
    steps: int = 50
    target: str = "heaviside"
    dtype: str = "float32"
    value_init: str = "normal"
    attention_weights: str = "trainable"

    def __post_init__(self):
        for name in ("T", "d", "depth", "n_samples"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("steps", self.steps, minimum=0)
        check_choice("attention", self.attention, KINDS)
        check_choice("target", self.target, TARGETS)
        check_choice("dtype", self.dtype, tuple(_DTYPES))
        check_choice("value_init", self.value_init, VALUE_INITS)
        check_choice("attention_weights", self.attention_weights, ATTENTION_WEIGHTS)

    @property
    def trained(self) -> tuple[str, ...]:
        """The names of the weights Adam updates (all of `init_weights` unless frozen)."""
        attention = ("logits",) if self.attention == "markov" else ("W_Q", "W_K")
        frozen = self.attention_weights == "frozen"
        return ("W_V", "W_h") if frozen else ("W_V", "W_h", *attention)

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]


def target(X: torch.Tensor, name: str) -> torch.Tensor:
    """The entrywise target f(X): Heaviside H(x) (H(0) = 0), sigmoid(20 (x + 1/2)), or H(x) - 1/2.

    Why the centred one: H(x) has mean 1/2, a component constant over tokens, which is
    exactly the direction the fix removes from every attention output; H(x) - 1/2 asks
    for the same sign pattern without it.
    """
    check_choice("target", name, TARGETS)
    if name == "sigmoid":
        return torch.sigmoid(20 * (X + 0.5))
    return (X > 0).to(X.dtype) - (0.5 if name == "heaviside_centred" else 0.0)


def data(config: TrainConfig, seed: int) -> torch.Tensor:
    """The `n_samples` isometric inputs (n_samples, T, d) of one seed (float64, CPU)."""
    g = rng.generator(seed, 1)
    return torch.stack(
        [gap.isometric_input(config.T, config.d, generator=g) for _ in range(config.n_samples)]
    )


def constant_loss(config: TrainConfig, seeds: int | Sequence[int]) -> torch.Tensor:
    """Per seed (n_seeds,), the MSE of the best constant prediction of the training target.

    The best single number to predict for every entry is the target's mean over the batch,
    and its MSE is the target's (population) variance: a baseline computed from each
    seed's data, as the model sees them (in config's dtype). A model whose loss is not
    below it has learnt nothing beyond that constant.
    """
    out = []
    for s in rng.check_seeds(seeds):
        Y = target(data(config, s).to(config.torch_dtype), config.target).to(torch.float64)
        out.append(Y.var(unbiased=False))
    return torch.stack(out)


def init_weights(config: TrainConfig, seed: int) -> dict[str, torch.Tensor]:
    """Per-layer initial weights for one seed, stacked over layers (float64, CPU).

    "W_V" (depth, d, d) ~ N(0, 1) (value_init "normal", the official configs) or
    N(0, 1/d) ("scaled", which keeps the signal's scale through the layers); "W_h"
    (depth, d, d) the identity, as the official `distribution_H="identity"`; then either
    "logits" (depth, T, T) ~ N(-ln 2 / 2, ln 2), whose row softmax is the Markov attention
    (the draw of `markov.random_markov`), or "W_Q", "W_K" (depth, d, d) with std 1/sqrt(d)
    (xavier) or 1 (normal). The draws depend neither on value_init's scale nor on
    attention_weights.
    """
    g = rng.generator(seed, 2)
    L, T, d = config.depth, config.T, config.d
    weights = {
        "W_V": torch.randn(L, d, d, generator=g, dtype=torch.float64)
        / (math.sqrt(d) if config.value_init == "scaled" else 1.0),
        "W_h": torch.eye(d, dtype=torch.float64).expand(L, d, d).clone(),
    }
    if config.attention == "markov":
        weights["logits"] = random_logits(T, generator=g, batch=(L,))
    else:
        std = 1 / math.sqrt(d) if config.attention == "xavier" else 1.0
        weights["W_Q"] = torch.randn(L, d, d, generator=g, dtype=torch.float64) * std
        weights["W_K"] = torch.randn(L, d, d, generator=g, dtype=torch.float64) * std
    return weights


def forward(
    X: torch.Tensor, weights: dict[str, torch.Tensor], shift: torch.Tensor
) -> torch.Tensor:
    """The stack on X (..., B, T, d); weights (..., L, d, d) per model (logits (..., L, T, T));
    shift (...,): 1/T where fixed, else 0.

    Leading dims of X, the weights and shift broadcast (models x data).
    """
    if "logits" in weights:
        return _forward_markov(X, weights, shift[..., None, None])
    s = shift[..., None, None, None]
    for layer in range(weights["W_V"].shape[-3]):
        W_Q, W_K = weights["W_Q"][..., layer, :, :], weights["W_K"][..., layer, :, :]
        scores = _right(X, W_Q @ W_K.transpose(-1, -2)) @ X.transpose(-1, -2)  # X W_Q (X W_K)^T
        A = torch.softmax(scores / math.sqrt(X.shape[-1]), dim=-1)
        W = weights["W_V"][..., layer, :, :] @ weights["W_h"][..., layer, :, :]
        X = (A - s) @ _right(X, W)
    return X


def _forward_markov(X: torch.Tensor, weights: dict[str, torch.Tensor], s) -> torch.Tensor:
    """`forward` for Markov attention, which one model applies to all its inputs alike.

    Why tokens first: held as Z (..., T, B d), the B inputs of a model side by side, each
    layer is two plain products, Z W and A Z, with no copy of A per input.
    """
    B, T, d = X.shape[-3:]
    Z = X.transpose(-3, -2).reshape(*X.shape[:-3], T, B * d)
    for layer in range(weights["W_V"].shape[-3]):
        W = weights["W_V"][..., layer, :, :] @ weights["W_h"][..., layer, :, :]
        A = torch.softmax(weights["logits"][..., layer, :, :], dim=-1)
        Z = (A - s) @ (Z.reshape(*Z.shape[:-2], T * B, d) @ W).reshape(*W.shape[:-2], T, B * d)
    return Z.unflatten(-1, (B, d)).transpose(-3, -2)


def _right(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """X @ W for X (..., B, T, d) and one W (..., d, d) per model: the B inputs share W, so
    their tokens stack into one (B T) x d matrix product per model instead of B small ones."""
    return (X.flatten(-3, -2) @ W).unflatten(-2, X.shape[-3:-1])


def adam_step(param, grad, m, v, step: int, lr, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
    """One in-place Adam update (torch.optim.Adam's defaults) with a broadcastable per-model lr.

    Why written out: torch.optim.Adam takes one lr per parameter tensor, and here one
    tensor holds many models that each need their own lr.
    """
    b1, b2 = betas
    m.mul_(b1).add_(grad, alpha=1 - b1)
    v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
    denom = (v / (1 - b2**step)).sqrt_().add_(eps)
    param.sub_(lr * (m / (1 - b1**step)) / denom)


def _check_lrs(lrs) -> list[float]:
    lrs = [lrs] if isinstance(lrs, (int, float)) else list(lrs)
    if not lrs:
        raise ParameterError("lrs must name at least one learning rate")
    return [check_float("lr", lr, positive=True) for lr in lrs]


def _train_block(
    config: TrainConfig, seeds: list[int], lrs: list[float], fixes: list[bool], device
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`train` for one block of models held in memory at once: losses and trained weights."""
    dt = config.torch_dtype
    X = torch.stack([data(config, s) for s in seeds]).to(device=device, dtype=dt)[
        :, None, None
    ]  # (S, 1, 1, B, T, d)
    Y = target(X, config.target)
    init = [init_weights(config, s) for s in seeds]
    shape = (len(seeds), len(lrs), len(fixes))
    stacked = {
        k: torch.stack([w[k] for w in init]).to(device=device, dtype=dt)[:, None, None]
        for k in init[0]
    }
    params = {k: v.expand(*shape, *v.shape[3:]).clone() for k, v in stacked.items()}
    trainable = [k for k in params if k in config.trained]
    for k in trainable:
        params[k].requires_grad_(True)
    shift = torch.tensor([1 / config.T if f else 0.0 for f in fixes], dtype=dt, device=device)
    lr = torch.tensor(lrs, dtype=dt, device=device)[
        :, None, None, None, None
    ]  # broadcast over (S, lr, fix, L, d, d)
    moments = {k: (torch.zeros_like(params[k]), torch.zeros_like(params[k])) for k in trainable}
    history = []
    for step in range(config.steps + 1):
        loss = (forward(X, params, shift) - Y).square().mean((-3, -2, -1))  # (S, n_lr, n_fix)
        history.append(loss.detach().to("cpu", torch.float64))
        if step == config.steps:
            break
        grads = torch.autograd.grad(loss.sum(), [params[k] for k in trainable])
        with torch.no_grad():
            for k, g in zip(trainable, grads, strict=True):
                adam_step(params[k], g, *moments[k], step + 1, lr)
    return torch.stack(history), {k: v.detach().to("cpu") for k, v in params.items()}


def model_bytes(config: TrainConfig) -> float:
    """Rough memory one model's training holds (activations saved for the backward pass)."""
    T, d = config.T, config.d
    per_sample = (3 * T * T + 4 * T * d) if config.attention != "markov" else (T * T + 3 * T * d)
    per_model = 3 * d * d + (3 * T * T if config.attention == "markov" else 0)  # W_V W_h, softmax
    size = torch.finfo(config.torch_dtype).bits // 8
    return float((per_sample * config.n_samples + per_model) * config.depth * size)


def train(
    config: TrainConfig,
    seeds: int | Sequence[int],
    lrs,
    fixes=(False, True),
    *,
    device=None,
    max_bytes: float = 2e9,
    return_weights: bool = False,
):
    """Losses (steps + 1, n_seeds, n_lrs, n_fixes): the MSE before training and after each step.

    Every (seed, lr, fix) model trains at once, in blocks of models that fit in
    `max_bytes` (a block's results do not depend on the blocking: models are
    independent). A model whose loss turns NaN or inf keeps that value; the other
    models are unaffected. With return_weights, also the trained weights
    {name: (n_seeds, n_lrs, n_fixes, *shape)} (the names of `init_weights`).
    """
    seeds = rng.check_seeds(seeds)
    lrs, fixes = _check_lrs(lrs), [bool(f) for f in fixes]
    per_pair = model_bytes(config) * len(fixes)
    lr_step = max(1, min(len(lrs), int(max_bytes // per_pair)))
    seed_step = max(1, int(max_bytes // (per_pair * lr_step)))
    rows, weights = [], []
    for s0 in range(0, len(seeds), seed_step):
        blocks = [
            _train_block(config, seeds[s0 : s0 + seed_step], lrs[l0 : l0 + lr_step], fixes, device)
            for l0 in range(0, len(lrs), lr_step)
        ]
        rows.append(torch.cat([b[0] for b in blocks], dim=2))
        if return_weights:
            weights.append({k: torch.cat([b[1][k] for b in blocks], dim=1) for k in blocks[0][1]})
    losses = torch.cat(rows, dim=1)
    if not return_weights:
        return losses
    return losses, {k: torch.cat([w[k] for w in weights]) for k in weights[0]}


def best_lr(final: torch.Tensor) -> torch.Tensor:
    """Index of the learning rate with the lowest mean final loss over seeds, per fix: final (S,
    n_lr, n_fix).

    A non-finite loss counts as +inf, so a diverged lr is never chosen unless every lr diverged.
    """
    f = torch.where(torch.isfinite(final), final, torch.full_like(final, math.inf))
    return f.mean(0).argmin(0)


def paired_ratio_ci(fixed, plain, level: float = 0.95) -> tuple[float, float, float]:
    """Geometric-mean ratio fixed/plain over paired seeds, with a Student-t CI on the log ratio.

    Returns (ratio, low, high); NaN where fewer than 2 finite pairs exist.
    """
    r = np.log(np.asarray(fixed, dtype=float)) - np.log(np.asarray(plain, dtype=float))
    r = r[np.isfinite(r)]
    if r.size < 2:
        return (math.nan, math.nan, math.nan)
    half = stats.t.ppf(0.5 + level / 2, r.size - 1) * r.std(ddof=1) / math.sqrt(r.size)
    return (
        float(np.exp(r.mean())),
        float(np.exp(r.mean() - half)),
        float(np.exp(r.mean() + half)),
    )


def train_flops(config: TrainConfig, n_models: int) -> float:
    """Rough FLOPs of `train` (forward + backward ~ 3x forward), for the notebook's ETA."""
    T, d = config.T, config.d
    layer = (
        2 * T * d * d
        + 2 * T * T * d
        + (0 if config.attention == "markov" else 4 * T * d * d + 2 * T * T * d)
    )
    per_model = 2 * d**3 + (5 * T * T if config.attention == "markov" else 0)  # W_V W_h, softmax
    return float(
        3 * (layer * config.n_samples + per_model) * config.depth * (config.steps + 1) * n_models
    )


def run_grid(kinds, depths, seeds, lrs, *, device=None, **task) -> dict:
    """`train` for every attention kind and depth: {(kind, depth): losses (steps+1, S, n_lr, 2)}.

    task: the other TrainConfig fields (T, d, n_samples, steps, target, dtype, value_init,
    attention_weights).
    """
    return {
        (k, L): train(TrainConfig(attention=k, depth=L, **task), seeds, lrs, device=device)
        for k in kinds
        for L in depths
    }


def _at_best(losses: torch.Tensor) -> torch.Tensor:
    """The loss curves (steps+1, S, n_fix) at each fix setting's best learning rate."""
    best = best_lr(losses[-1])
    return torch.stack([losses[:, :, b, j] for j, b in enumerate(best.tolist())], dim=-1)


def summary(runs: dict, lrs) -> pd.DataFrame:
    """Per (kind, depth, fix): best lr, mean initial and final loss, and the seed-mean of
    final/initial."""
    rows = []
    for (kind, depth), losses in runs.items():
        curves, best = _at_best(losses), best_lr(losses[-1]).tolist()
        for j, fix in enumerate((False, True)):
            c = curves[..., j]
            rows.append(
                (
                    kind,
                    depth,
                    fix,
                    lrs[best[j]],
                    c[0].mean().item(),
                    c[-1].mean().item(),
                    c[-1].std().item(),
                    (c[-1] / c[0]).mean().item(),
                )
            )
    columns = [
        "kind",
        "depth",
        "fix",
        "best lr",
        "initial",
        "final",
        "final std",
        "final / initial",
    ]
    return pd.DataFrame(rows, columns=columns).set_index(["kind", "depth", "fix"])


def benefit(runs: dict, level: float = 0.95) -> pd.DataFrame:
    """Per (kind, depth): final(fix)/final(no fix) at each arm's best lr, geometric mean over the
    paired seeds with its Student-t CI (`paired_ratio_ci`), and whether a benefit is claimed
    (the whole CI below 0.95)."""
    rows = {}
    for key, losses in runs.items():
        final = _at_best(losses)[-1].numpy()
        ratio, lo, hi = paired_ratio_ci(final[:, 1], final[:, 0], level)
        rows[key] = {
            "ratio": ratio,
            "ci low": lo,
            "ci high": hi,
            "benefit claimed": bool(hi < 0.95),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(["kind", "depth"])


# Reading the runs on the page: names, tables and sentences of the numbers above.

KIND_LABELS = {  # MyST math on the page and matplotlib's mathtext in figures read these alike
    "markov": "Markov $A$",
    "normal": "$A(X)$, $N(0,1)$",
    "xavier": "$A(X)$, Xavier",
}
_SYMBOLS = {"markov": "A", "normal": "A(X)", "xavier": "A(X)"}  # TeX, without the dollars


def arm_name(kind: str, fix: bool) -> str:
    r"""The attention of one arm, fixed or not, in math: how a table row names it.

    Examples
    --------
    >>> arm_name("normal", True), arm_name("markov", False)
    ('$A(X)^\\perp$, $N(0,1)$', 'Markov $A$')
    """
    name = "$" + _SYMBOLS[kind] + (r"^\perp" if fix else "") + "$"
    return {"markov": f"Markov {name}", "normal": f"{name}, $N(0,1)$",
            "xavier": f"{name}, Xavier"}[kind]


_TICKS = {"markov": "Markov", "normal": "$N(0,1)$", "xavier": "Xavier"}


def case_tick(case: tuple) -> str:
    """A (kind, depth) case as a figure's x tick, on two short lines.

    Examples
    --------
    >>> case_tick(("normal", 2))
    '$N(0,1)$\\n$L = 2$'
    """
    kind, depth = case
    return f"{_TICKS[kind]}\n$L = {depth}$"


def best_curves(losses: torch.Tensor) -> dict:
    """The loss curves (steps+1, S) at each fix setting's best learning rate, {False: ...,
    True: ...}: what a figure of one configuration draws."""
    best = best_lr(losses[-1]).tolist()
    return {f: losses[:, :, best[j], j].numpy() for j, f in enumerate((False, True))}


def summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """A `summary` frame for the page: one row per arm, named in math, with headers."""
    rows = frame.reset_index()
    return pd.DataFrame({
        "Attention": [arm_name(k, f) for k, f in zip(rows["kind"], rows["fix"], strict=True)],
        "$L$": rows["depth"],
        "Best learning rate": rows["best lr"],
        "Initial loss": rows["initial"],
        "Final loss": rows["final"],
        "Final / initial": rows["final / initial"],
    })


def benefit_table(frame: pd.DataFrame) -> pd.DataFrame:
    """A `benefit` frame (index (kind, depth), or (arm, kind, depth)) for the page: the
    ratio, its 95 % interval and whether it decides a gain of 5 % or more.

    Examples
    --------
    >>> gains = pd.DataFrame({"ratio": [0.9], "ci low": [0.8], "ci high": [1.0]},
    ...                      index=pd.MultiIndex.from_tuples([("markov", 1)]))
    >>> benefit_table(gains)[["Attention", "95 % CI", "Gain of 5 % or more"]].iloc[0].tolist()
    ['Markov $A$', '[0.8, 1]', 'undecided']
    """
    rows = frame.copy()
    rows.index.names = ["arm", "kind", "depth"][-rows.index.nlevels :]
    rows = rows.reset_index()
    out = pd.DataFrame({"Arm": rows["arm"]} if "arm" in rows else {})
    out["Attention"] = rows["kind"].map(KIND_LABELS)
    out["$L$"] = rows["depth"]
    out["Final loss, fix / no fix"] = rows["ratio"]
    low, high = rows["ci low"], rows["ci high"]
    out["95 % CI"] = [f"[{lo:.3g}, {hi:.3g}]" for lo, hi in zip(low, high, strict=True)]
    out["Gain of 5 % or more"] = [
        "yes" if hi < 0.95 else "no" if lo >= 0.95 else "undecided"
        for lo, hi in zip(low, high, strict=True)
    ]
    return out


def benefit_text(frame: pd.DataFrame, key=None) -> str:
    """'1.03 [0.99, 1.08]': a `benefit` row's ratio and 95 % interval ('not run' when the
    frame lacks it); without `key`, every row, each followed by its attention kind.

    Examples
    --------
    >>> gains = pd.DataFrame({"ratio": [0.9], "ci low": [0.8], "ci high": [1.0]},
    ...                      index=pd.MultiIndex.from_tuples([("markov", 1)]))
    >>> benefit_text(gains, ("markov", 1)), benefit_text(gains, ("normal", 1))
    ('0.90 [0.80, 1.00]', 'not run')
    >>> benefit_text(gains)
    '0.90 [0.80, 1.00] (Markov $A$)'
    """
    def text(g):
        return f"{g['ratio']:.2f} [{g['ci low']:.2f}, {g['ci high']:.2f}]"

    if key is None:
        return ", ".join(f"{text(g)} ({KIND_LABELS[k]})" for (k, _), g in frame.iterrows())
    return text(frame.loc[key]) if key in frame.index else "not run"


def benefit_rows(frame: pd.DataFrame, outcome: str) -> str:
    """The (kind, depth) rows of a `benefit` frame whose interval lies below 0.95
    (outcome "holds") or straddles it ("inconclusive"), as a sentence names them.

    Examples
    --------
    >>> gains = pd.DataFrame({"ratio": [0.9], "ci low": [0.8], "ci high": [1.0]},
    ...                      index=pd.MultiIndex.from_tuples([("markov", 1)]))
    >>> benefit_rows(gains, "holds"), benefit_rows(gains, "inconclusive")
    ('none', 'Markov $A$ at depth 1')
    """
    found = [
        f"{KIND_LABELS[k]} at depth {L}"
        for (k, L), g in frame.iterrows()
        if (g["ci high"] < 0.95 if outcome == "holds" else g["ci low"] < 0.95 <= g["ci high"])
    ]
    return ", ".join(found) if found else "none"


def column_sum_spread(logits: torch.Tensor) -> np.ndarray:
    """||c - 1|| for the column sums c of softmax(logits), one value per model (..., T, T):
    how far the attention is from giving every token the same total weight."""
    return (torch.softmax(logits.double(), -1).sum(-2) - 1).norm(dim=-1).numpy()
