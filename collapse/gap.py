"""The Mind-the-Gap model: attention-only stacks at initialisation and rank collapse in width.

Following the official code of Nait Saada, Naderi & Tanner:

    X_l = A_l X_{l-1} W_l          W_l ~ N(0, 1) entrywise, no 1/sqrt(d)
    +skip:  X_l = X_{l-1} + A_l X_{l-1} W_l      (one residual; the official block adds two)
    +LN:    nn.LayerNorm(d) (centred, eps 1e-5, no affine) applied last, post-LN
    fix:    A_l replaced by A_l - (1/T) 1 1^T, which removes the outlier eigenvalue 1

A_l is a fresh random Markov matrix per layer ("markov"), the identity ("identity"),
or key-query attention softmax(X W_Q (X W_K)^T / sqrt(d)) with W_Q, W_K drawn Xavier
("xavier": N(0, 1/d), the official configs) or N(0, 1) ("normal", the official
notebook). X_0 is isometric. `map` replaces the softmax by one of the maps read as implicit
fixes (`attention_maps`): centred A - U; differential A1 - lam A2, with A2 a second
independent Markov matrix (its own generator stream) or, for key-query attention, the two
halves of W_Q and W_K, and lam fixed or lam_init(l) at layer l; sigmoid(S - log T) of the
same logits. `simulate_many` runs in float64: the unscaled N(0, 1) weights grow X by
~sqrt(d) per layer, which overflows float32 within ~9 layers.

Grids run batched: `simulate_many` advances several configurations and all seeds as
leading tensor dims through one draw of each layer's random matrices per seed (the
draws do not depend on fix, skip or LN, so configurations with the same attention
kind share them); `width_sweep` loops that over (gamma, T) cells and returns a tidy
frame. A seed's numbers never depend on which other seeds or configurations share
its batch: every seed draws from its own generator, in the same order as a lone run.

`simulate_shared` (`width_sweep(..., fast=True)`) is the fast engine for Markov and
identity stacks: one float32 draw per seed shared by every configuration
(`shared_draws`), float32 arithmetic rescaled every layer, and the stacks without skip
factored through one shared X W chain. Other draws than `simulate_many`, the same model:
run in float64 on the same draws it equals `gap_layer`, layer by layer, to rounding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from . import metrics as _metrics
from . import rng
from .attention import attention_matrix, remove_outlier, scores
from .attention_maps import MAPS, centred_map, differential_map, lambda_init, sigmoid_map
from .checks import ParameterError, check_choice, check_float, check_int
from .markov import random_logits, random_markov

__all__ = [
    "ATTENTIONS",
    "KEYQUERY",
    "GapConfig",
    "isometric_input",
    "attention_draws",
    "layer_attention",
    "config_attention",
    "layer_draws",
    "stacked_draws",
    "input_and_generator",
    "second_map_generator",
    "attention_matrices",
    "gap_layer",
    "simulate",
    "simulate_many",
    "SHARED_METRICS",
    "shared_draws",
    "simulate_shared",
    "official_gram_stable_rank",
    "METRICS",
    "width_for",
    "fig7_variants",
    "width_sweep",
    "width_sweep_flops",
    "first_layer",
    "first_maps",
    "free_product_edge",
    "layer1_limits",
]

ATTENTIONS = ("markov", "identity", "xavier", "normal")
KEYQUERY = ("xavier", "normal")  # attention A(X) = softmax(X W_Q (X W_K)^T / sqrt(d))


@dataclass(frozen=True)
class GapConfig:
    """One configuration of the Mind-the-Gap stack; validated on construction."""

    T: int
    d: int
    n_layers: int
    attention: str = "markov"
    fix: bool = False
    skip: bool = False
    layernorm: bool = False
    map: str = "softmax"
    lam: float | None = None  # differential only: a fixed lam, or None for lam_init(l)

    def __post_init__(self):
        check_int("T", self.T, minimum=1)
        check_int("d", self.d, minimum=1)
        check_int("n_layers", self.n_layers, minimum=0)
        check_choice("attention", self.attention, ATTENTIONS)
        check_choice("map", self.map, MAPS)
        if self.map != "softmax" and self.attention == "identity":
            raise ParameterError(f"map must be softmax for identity attention, got {self.map!r}")
        if self.fix and self.map != "softmax":
            raise ParameterError(
                f"fix applies to the softmax map only (centred attention is the fix's own map), "
                f"got fix=True with map={self.map!r}"
            )
        if self.lam is not None:
            if self.map != "differential":
                raise ParameterError(
                    f"lam applies to map='differential' only, got map={self.map!r}"
                )
            check_float("lam", self.lam)
        if self.map == "differential" and self.attention in KEYQUERY and self.d % 2:
            raise ParameterError(
                f"d must be even for key-query differential attention (two halves), got {self.d}"
            )

    def layer_lambda(self, layer: int) -> float:
        """lam of layer `layer` (1-based): the fixed lam, else the schedule lam_init(layer)."""
        return lambda_init(layer) if self.lam is None else float(self.lam)

    @property
    def label(self) -> str:
        """Short name in the paper's style: A, A⊥+skip+LN, Identity A, A(X) (xavier)..."""
        base = {
            "markov": "A",
            "identity": "Identity A",
            "xavier": "A(X) xavier",
            "normal": "A(X) N(0,1)",
        }[self.attention]
        if self.map != "softmax":
            lam = "" if self.lam is None else f"(λ={self.lam:g})"
            base += (
                " "
                + {"centred": "centred", "differential": "diff", "sigmoid": "sigmoid"}[self.map]
                + lam
            )
        return (
            base
            + ("⊥" if self.fix else "")
            + ("+skip" if self.skip else "")
            + ("+LN" if self.layernorm else "")
        )


def isometric_input(
    T: int, d: int, *, generator: torch.Generator | None = None, dtype=torch.float64
) -> torch.Tensor:
    """T x d with orthonormal rows (T <= d) or columns (T > d): a slice of a Haar orthogonal
    matrix."""
    n = max(check_int("T", T, minimum=1), check_int("d", d, minimum=1))
    q, r = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r)))[:T, :d].to(dtype)


def attention_draws(
    kind: str, g: torch.Generator, T: int, d: int, batch=(), *, maps=("softmax",)
) -> dict[str, torch.Tensor]:
    """The random part of one layer's attention, float64 on the CPU, drawn from g.

    "markov": the matrix A (and, when `maps` has "sigmoid", sigmoid(G - log T) of the same
    logits G); "xavier" / "normal": the key-query weights W_Q, W_K with N(0, 1/d) or
    N(0, 1) entries; "identity" draws nothing. Each leading `batch` dim gets its own draw.
    """
    if kind == "markov":
        logits = random_logits(T, generator=g, batch=batch)
        draws = {"A": torch.softmax(logits, dim=-1)}  # random_markov's very bits
        if "sigmoid" in maps:
            draws["sigmoid"] = sigmoid_map(logits)
        return draws
    if kind == "identity":
        return {}
    std = 1 / math.sqrt(d) if kind == "xavier" else 1.0
    return {
        role: torch.randn(*batch, d, d, generator=g, dtype=torch.float64) * std
        for role in ("W_Q", "W_K")
    }


def layer_attention(
    kind: str, X: torch.Tensor, draws: dict[str, torch.Tensor], *, map="softmax", lam=0.0
) -> torch.Tensor:
    """This layer's attention at X (..., T, d) from its draws: A, the identity, or
    softmax(X W_Q (X W_K)^T / sqrt(d)), or `map` in their place (lam: differential's)."""
    T = X.shape[-2]
    if kind == "identity":
        return torch.eye(T, dtype=X.dtype, device=X.device).expand(*X.shape[:-2], T, T)
    if kind == "markov":
        if map == "sigmoid":
            return draws["sigmoid"]
        first = draws["A"]
        second = draws["A2"] if map == "differential" else None
    elif map == "sigmoid":
        return sigmoid_map(scores(X @ draws["W_Q"], X @ draws["W_K"]))
    elif map == "differential":
        W_Q, W_K, half = draws["W_Q"], draws["W_K"], draws["W_Q"].shape[-1] // 2
        first = attention_matrix(X, W_Q[..., :half], W_K[..., :half])
        second = attention_matrix(X, W_Q[..., half:], W_K[..., half:])
    else:
        first = attention_matrix(X, draws["W_Q"], draws["W_K"])
    if map == "differential":
        return differential_map(first, second, lam)
    return centred_map(first) if map == "centred" else first


def config_attention(
    config: GapConfig, X: torch.Tensor, draws: dict[str, torch.Tensor], layer: int
) -> torch.Tensor:
    """Layer `layer`'s (1-based) attention map of `config` at X, before the fix."""
    return layer_attention(
        config.attention, X, draws, map=config.map, lam=config.layer_lambda(layer)
    )


def attention_matrices(X: torch.Tensor, kind: str, g: torch.Generator) -> torch.Tensor:
    """This layer's attention for a batch X (..., T, d), drawn from g (identity draws nothing)."""
    return layer_attention(kind, X, attention_draws(kind, g, *X.shape[-2:], batch=X.shape[:-2]))


def gap_layer(
    X: torch.Tensor, A: torch.Tensor, W: torch.Tensor, config: GapConfig
) -> torch.Tensor:
    """One layer given its attention A and value weights W (differentiable: gradients use it)."""
    if config.fix:
        A = remove_outlier(A)
    Y = A @ X @ W
    if config.skip:
        Y = X + Y
    if config.layernorm:
        Y = torch.nn.functional.layer_norm(Y, Y.shape[-1:], eps=1e-5)
    return Y


# ---------------------------------------------------------------------------------------
# Metrics: the stable ranks from the Gram matrix, and the official code's float32 version


def official_gram_stable_rank(X: torch.Tensor) -> torch.Tensor:
    """The official code's sr(XX^T), in X's own dtype: s = svdvals(X X^T), sum s^2 / max s^2.

    Why: in float32 s^2 = sigma^4 overflows once sigma_1(X)^2 passes ~1.8e19, which the
    unscaled N(0, 1) weights reach within ~9 layers at d = 150; the official script
    then records NaN (it catches the failure, as we do for a non-finite X X^T). Use it
    only to show that effect: `gram_stable_rank` is the same quantity done safely.
    """
    sigma = X @ X.transpose(-1, -2)
    finite = torch.isfinite(sigma).all(-1).all(-1)
    s = torch.linalg.svdvals(torch.where(finite[..., None, None], sigma, torch.zeros_like(sigma)))
    value = (s**2).sum(-1) / (s**2).amax(-1)
    return torch.where(finite, value, torch.full_like(value, math.nan))


METRICS = (*_metrics.METRICS, "official_gram_stable_rank")


def _check_metrics(names) -> tuple[str, ...]:
    return _metrics.check_metric_names(names, METRICS)


def _evaluate(X: torch.Tensor, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Metrics of X as float64 CPU tensors (the official float32 metric on request)."""
    out = _metrics.evaluate(X, [n for n in names if n != "official_gram_stable_rank"])
    if "official_gram_stable_rank" in names:
        out["official_gram_stable_rank"] = official_gram_stable_rank(X)
    return {n: out[n].to("cpu", torch.float64) for n in names}


# ---------------------------------------------------------------------------------------
# The batched engine


def layer_draws(
    kind: str, g: torch.Generator, T: int, d: int, *, maps=("softmax",), second=None
) -> dict[str, torch.Tensor]:
    """One layer's random matrices for one seed, in a lone run's order: attention, then W.

    With "differential" in `maps`, Markov attention also draws its second matrix "A2" from
    `second` (`second_map_generator`), so that no other configuration's draws move.
    """
    draws = attention_draws(kind, g, T, d, maps=maps)
    draws["W"] = torch.randn(d, d, generator=g, dtype=torch.float64)
    if kind == "markov" and "differential" in maps:
        if second is None:
            raise ParameterError("differential Markov attention needs its second generator")
        draws["A2"] = random_markov(T, generator=second)
    return draws


def input_and_generator(config: GapConfig, seed: int) -> tuple[torch.Tensor, torch.Generator]:
    """Seed `seed`'s X_0 and the generator its layers then draw from (stream 0 of the seed)."""
    g = rng.generator(seed, 0)
    return isometric_input(config.T, config.d, generator=g), g


def second_map_generator(seed: int) -> torch.Generator:
    """The stream (seed, 1) of differential attention's second Markov matrices."""
    return rng.generator(seed, 1)


def _clone(g: torch.Generator) -> torch.Generator:
    h = torch.Generator()
    h.set_state(g.get_state())
    return h


def stacked_draws(configs, gens, seconds, dtype=torch.float64, device=None) -> dict:
    """One layer's draws for every seed (generators `gens`, `seconds`), stacked over seeds:
    what every configuration of one attention kind in `configs` needs."""
    first, maps = configs[0], tuple({c.map for c in configs})
    per_seed = [
        layer_draws(first.attention, g, first.T, first.d, maps=maps, second=h)
        for g, h in zip(gens, seconds, strict=True)
    ]
    return {
        k: torch.stack([p[k] for p in per_seed]).to(dtype=dtype, device=device)
        for k in per_seed[0]
    }


def _run_group(
    configs: list[GapConfig], gens, seconds, X0, names, dtype, device
) -> dict[str, torch.Tensor]:
    """Configurations sharing T, d, n_layers and attention kind, all seeds at once -> {metric: (C,
    L+1, S)}.

    One draw per layer and seed feeds every configuration; each configuration then takes
    its own gap_layer step, batched over the seeds (so its numbers are gap_layer's).
    """
    first = configs[0]
    states = [X0] * len(configs)
    start = _evaluate(X0, names)
    history = [{n: [v] for n, v in start.items()} for _ in configs]
    for layer in range(1, first.n_layers + 1):
        draws = stacked_draws(configs, gens, seconds, dtype, device)
        for c, config in enumerate(configs):
            states[c] = gap_layer(
                states[c], config_attention(config, states[c], draws, layer), draws["W"], config
            )
            for n, v in _evaluate(states[c], names).items():
                history[c][n].append(v)
    return {n: torch.stack([torch.stack(h[n]) for h in history]) for n in names}


def _check_configs(configs) -> list[GapConfig]:
    configs = list(configs)
    if not configs or not all(isinstance(c, GapConfig) for c in configs):
        raise ParameterError("configs must be a non-empty sequence of GapConfig")
    shapes = {(c.T, c.d, c.n_layers) for c in configs}
    if len(shapes) > 1:
        raise ParameterError(
            f"configs must share T, d and n_layers, got (T, d, n_layers) in {sorted(shapes)}"
        )
    return configs


@torch.inference_mode()
def simulate_many(
    configs: Sequence[GapConfig],
    seeds: int | Sequence[int] = 0,
    *,
    metrics=("gram_stable_rank",),
    dtype=torch.float64,
    device=None,
    seed_batch: int | None = None,
) -> dict[str, torch.Tensor]:
    """Per-layer metrics (n_configs, L+1, n_seeds) of several configurations with the same T, d and
    depth.

    Why: a grid (the nine curves of Fig. VII, or the README sweep) costs one draw of each
    layer's random matrices per seed and attention kind instead of one per configuration,
    and runs all seeds and configurations as batched matmuls. For one seed, every
    configuration sees the same X_0 and, within an attention kind, the same A_l and W_l:
    the curves are paired. Numbers equal `simulate` on each configuration alone.

    dtype: the precision of the run (float64 by default; float32 reproduces the
    official code's overflow); draws are made in float64 and cast, so both precisions
    see the same random matrices. Metrics come back as float64 CPU tensors;
    "official_gram_stable_rank" is computed in the run's dtype. seed_batch bounds
    memory by running that many seeds at a time (results do not change).
    """
    configs = _check_configs(configs)
    names = _check_metrics(metrics)
    seeds = rng.check_seeds(seeds)
    if dtype not in (torch.float32, torch.float64):
        raise ParameterError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    chunk = len(seeds) if seed_batch is None else check_int("seed_batch", seed_batch, minimum=1)
    kinds = list(dict.fromkeys(c.attention for c in configs))
    out = {
        n: torch.empty(len(configs), configs[0].n_layers + 1, len(seeds), dtype=torch.float64)
        for n in names
    }
    for start in range(0, len(seeds), chunk):
        part = seeds[start : start + chunk]
        X0, gens = zip(*(input_and_generator(configs[0], s) for s in part), strict=True)
        X0 = torch.stack(X0).to(dtype=dtype, device=device)
        for kind in kinds:
            index = [i for i, c in enumerate(configs) if c.attention == kind]
            seconds = [second_map_generator(s) for s in part]
            result = _run_group(
                [configs[i] for i in index],
                [_clone(g) for g in gens],
                seconds,
                X0,
                names,
                dtype,
                device,
            )
            for n, v in result.items():
                out[n][index, :, start : start + len(part)] = v
    return out


def simulate(
    config: GapConfig,
    seeds: int | Sequence[int] = 0,
    *,
    metrics=("gram_stable_rank",),
    dtype=torch.float64,
    device=None,
) -> dict[str, torch.Tensor]:
    """Per-layer metrics (L+1, n_seeds) of the stack, one independent network and input per seed.

    Seed s draws X_0, then each layer's attention and W_l, from its own generator, so a
    run is the same whether its seed is computed alone or in a batch. A layer whose
    output is exactly zero (A(X)-fix with Xavier weights can get there) gives NaN ratios.
    dtype and device as in `simulate_many`.
    """
    result = simulate_many([config], seeds, metrics=metrics, dtype=dtype, device=device)
    return {n: v[0] for n, v in result.items()}


# ---------------------------------------------------------------------------------------
# The shared-draw engine: the Fig. VII grid in float32, one draw per seed for every curve

SHARED_METRICS = ("stable_rank", "gram_stable_rank")
_X0_AND_W_STREAM, _LOGITS_STREAM = 2, 3


def _fill_shared_draws(X0, W, logits, T: int, d: int, seed: int) -> None:
    """Fill one seed's X_0 (T, d), W (L, d, d) and, unless None, logits (L, T, T) in place."""
    g = rng.generator(seed, _X0_AND_W_STREAM)
    n, m = max(T, d), min(T, d)
    q, r = torch.linalg.qr(torch.randn(n, m, generator=g, dtype=X0.dtype).double())
    q = q * torch.sign(torch.diagonal(r))
    X0.copy_(q.mT if d >= T else q)
    for w in W:
        w.normal_(generator=g)
    if logits is not None:
        h = rng.generator(seed, _LOGITS_STREAM)
        for layer in logits:
            layer.normal_(generator=h)
        logits.mul_(math.sqrt(math.log(2))).sub_(math.log(2) / 2)


def shared_draws(
    T: int, d: int, n_layers: int, seed: int, *, markov: bool = True
) -> dict[str, torch.Tensor]:
    """Seed `seed`'s random matrices for `simulate_shared`, float32: X_0 (T, d), W (L, d, d)
    and, with `markov`, the logits (L, T, T) of the Markov matrices A_l = softmax(logits_l).

    Why one set for every configuration: Markov and identity stacks of one seed then see
    the same X_0 and W_l (a paired design), and the very draws can be handed to other code,
    such as the official float32 model. X_0 (orthonormal rows, or columns if T > d, from
    the QR of a Gaussian) and then each W_l come from stream (seed, 2), the logits from
    (seed, 3), layer after layer, so a shallower stack draws a prefix of a deeper one.
    """
    T, d = check_int("T", T, minimum=1), check_int("d", d, minimum=1)
    n_layers = check_int("n_layers", n_layers, minimum=0)
    (seed,) = rng.check_seeds([seed])
    out = {"X0": torch.empty(T, d), "W": torch.empty(n_layers, d, d)}
    if markov:
        out["logits"] = torch.empty(n_layers, T, T)
    _fill_shared_draws(out["X0"], out["W"], out.get("logits"), T, d, seed)
    return out


def _layer_attention(config: GapConfig, A, perp, identity=None):
    """A_l, A_l - 11^T/T or `identity` for `config`."""
    if config.attention == "identity":
        return identity
    return perp if config.fix else A


def _shared_grams(configs, X0, W, logits) -> torch.Tensor:
    """X_l X_l^T of every configuration at layers 1..L: (C, L, S, T, T) in the draws' dtype.

    Why factors: a stack without skip is X_l = M_l R_l, where the chain R_l = X_0 W_1 ... W_l
    (with the centring C = I - 11^T/d after each W_l under LN) is common to all such stacks
    and only the T x T factor is per configuration: M_l = A_l M_{l-1} (A_l⊥ M_{l-1}, or the
    identity), rows then scaled by 1/std under LN, the std read off the diagonal of the
    Gram N K N^T (K = R_l R_l^T). The centred chain is the plain one plus a rank-l term,
    R_l + P_l B_l^T, updated as R_l C + P_{l-1} (C W_l^T B_{l-1})^T, which costs d^2 l, not
    T d^2, a layer. So each layer costs one X W product for the chain and one per skip
    stack, and layer 1 a single X_0 W_1. Skip stacks run as they are. The chain, the skip
    stacks and the factors without LN are divided by their RMS every layer (B_l by the
    chain's), which no stable rank sees and which keeps float32 finite over any depth; the
    LN factors absorb the chain's division.
    """
    S, L = W.shape[:2]
    T, d = X0.shape[-2:]
    plain = [i for i, c in enumerate(configs) if not c.skip]
    skips = [i for i, c in enumerate(configs) if c.skip]
    centred = any(configs[i].layernorm for i in plain)
    n = bool(plain) + len(skips)
    # plain identity stacks without LN are the chain itself; the others keep a factor M_l
    bare = [i for i in plain if configs[i].attention == "identity" and not configs[i].layernorm]
    kept = [i for i in plain if i not in bare]
    layernorm = torch.tensor([configs[i].layernorm for i in kept], device=X0.device)[:, None]
    eye = torch.eye(T, dtype=X0.dtype, device=X0.device).expand(S, T, T)
    M = None
    u = X0.new_full((S, d, 1), d**-0.5)
    P, B = X0.new_empty(S, T, 0), X0.new_empty(S, d, 0)
    grams = X0.new_empty(len(configs), L, S, T, T)
    states = prev = None
    for layer in range(L):
        A = perp = None
        if logits is not None:
            A = torch.softmax(logits[:, layer], dim=-1)
            perp = A - 1 / T
        if states is None:  # layer 1: every stack starts from the same X_0
            Y = (X0 @ W[:, layer]).unsqueeze(1).expand(S, n, T, d)
            prev = X0.unsqueeze(1).expand(S, n, T, d)
        else:
            Y = (states.view(S, n * T, d) @ W[:, layer]).view(S, n, T, d)
        new, K = [], {}
        if plain:
            R = Y[:, 0].clone()
            G = R @ R.mT
            scale = _rms(G, d)
            if centred:
                WB = W[:, layer].mT @ B
                B = torch.cat([(WB - WB.mean(1, keepdim=True)) / scale, u], dim=-1)
                P = torch.cat([P, -(R @ u) / scale], dim=-1)
            new.append(R.div_(scale))
            K[False] = G.div_(scale**2)
            if centred:  # (R + P B^T)(R + P B^T)^T without forming it: T d l, not T^2 d
                EP = (R @ B) @ P.mT
                K[True] = K[False] + EP + EP.mT + P @ (B.mT @ B) @ P.mT
        for k, i in enumerate(skips, start=bool(plain)):
            att = _layer_attention(configs[i], A, perp)
            Z = (Y[:, k] if att is None else att @ Y[:, k]) + prev[:, k]
            if configs[i].layernorm:
                Z = torch.nn.functional.layer_norm(Z, (d,), eps=1e-5)
            G = torch.matmul(Z, Z.mT, out=grams[i, layer])
            new.append(Z if configs[i].layernorm else Z.div_(_rms(G, d)))
        if kept:  # the factors of the plain stacks, batched over configurations
            att = torch.stack([_layer_attention(configs[i], A, perp, eye) for i in kept], 1)
            N = att if M is None else att @ M
            # LN: undo the chain's division, so that N R_l is LN's input; else scale-free
            rms = N.square().mean((-2, -1), keepdim=True).sqrt()
            N = torch.where(layernorm[..., None], scale[..., None] * N, N / rms)
            G = N @ torch.stack([K[configs[i].layernorm] for i in kept], 1) @ N.mT
            std = torch.where(layernorm, (G.diagonal(dim1=-2, dim2=-1) / d + 1e-5).rsqrt(), 1.0)
            M = std[..., None] * N
            grams[kept, layer] = (std[..., None] * G * std[..., None, :]).transpose(0, 1)
        for i in bare:
            grams[i, layer] = K[False]
        states = prev = torch.stack(new, dim=1)
    return grams


def _rms(G: torch.Tensor, d: int) -> torch.Tensor:
    """RMS entry (S, 1, 1) of the T x d matrices whose Gram matrices are G (S, T, T)."""
    return (G.diagonal(dim1=-2, dim2=-1).mean(-1) / d).sqrt()[:, None, None]


def _stable_ranks(grams: torch.Tensor, dominant: bool, steps: int = 8):
    """(sr(X), sr(XX^T)) in float64 from Gram matrices X X^T (..., T, T); NaN for a zero or
    non-finite one. `dominant`: try power steps first.

    Why not eigvalsh alone: it was a third of the sweep, and only lam_max is needed, since
    sum lam = trace and sum lam^2 = ||G||_F^2. Stacks that collapse have one dominant
    eigenvalue, which a few power steps from the all-ones vector pin down: their Rayleigh
    quotient theta is kept where certified, i.e. residual r <= 1000 eps theta (eps of the
    dtype) and (theta - r)^2 > ||G||_F^2 / 2 (two eigenvalues >= theta - r cannot both fit,
    so the one within r of theta is lam_max, and lam_max is in [theta, theta + r]);
    eigvalsh does the rest, on a view of `grams` where it can (no copy).
    """
    trace = grams.diagonal(dim1=-2, dim2=-1).sum(-1).double()
    frob2 = grams.square().sum((-2, -1)).double()  # cascade sum: vector_norm loses 1e-5
    top = torch.full_like(trace, math.nan)
    if dominant:
        v = grams.new_full((*grams.shape[:-1], 1), grams.shape[-1] ** -0.5)
        for _ in range(steps):
            w = grams @ v
            v = w / torch.linalg.vector_norm(w, dim=-2, keepdim=True)
        w = grams @ v
        theta = (v * w).sum((-2, -1))
        r = torch.linalg.vector_norm(w - theta[..., None, None] * v, dim=(-2, -1))
        tol = 1000 * torch.finfo(grams.dtype).eps
        ok = (r <= tol * theta) & ((theta - r).double() ** 2 > frob2 / 2)
        top = torch.where(ok, theta.double(), top)
    rest = torch.isfinite(trace + frob2) & torch.isnan(top)
    if rest.all():
        top = torch.linalg.eigvalsh(grams)[..., -1].double().clamp_min(0)
    elif rest.any():
        top[rest] = torch.linalg.eigvalsh(grams[rest])[..., -1].double().clamp_min(0)
    return trace / top, frob2 / top**2


@torch.inference_mode()
def simulate_shared(
    configs: Sequence[GapConfig],
    seeds: int | Sequence[int] = 0,
    *,
    metrics=("gram_stable_rank",),
    dtype=torch.float32,
    device=None,
    seed_batch: int | None = None,
) -> dict[str, torch.Tensor]:
    """Per-layer stable ranks (n_configs, L+1, n_seeds) of Markov and identity stacks from
    `shared_draws`: the fast engine behind `width_sweep(..., fast=True)`.

    Why: the README sweep of the official code in a few seconds on one core. Every
    configuration of a seed runs on the same X_0, W_l and A_l (a paired design), draws cost
    float32 normals, stacks without skip share their X W products (`_shared_grams`), and
    lam_max comes from certified power steps or eigvalsh (`_stable_ranks`). Its numbers are
    not `simulate_many`'s (other draws), but the same model: dtype=torch.float64 reruns the
    very draws in float64, against which float32 is within ~1e-5 on the README grid
    (benchmarks/mtg_stable_rank.py checks it). A zero stack gives NaN.
    """
    configs = _check_configs(configs)
    for c in configs:
        if c.attention not in ("markov", "identity") or c.map != "softmax":
            raise ParameterError(
                "simulate_shared runs Markov and identity attention with the softmax map only, "
                f"got {c.label!r}"
            )
    names = _metrics.check_metric_names(metrics, SHARED_METRICS)
    seeds = rng.check_seeds(seeds)
    if dtype not in (torch.float32, torch.float64):
        raise ParameterError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    chunk = len(seeds) if seed_batch is None else check_int("seed_batch", seed_batch, minimum=1)
    T, d, L = configs[0].T, configs[0].d, configs[0].n_layers
    markov = any(c.attention == "markov" for c in configs)
    # Markov stacks without the fix collapse (one dominant eigenvalue): run first, grams[:k]
    dominant = [c.attention == "markov" and not c.fix for c in configs]
    order, k = sorted(range(len(configs)), key=lambda i: not dominant[i]), sum(dominant)
    out = {n: torch.empty(len(configs), L + 1, len(seeds), dtype=torch.float64) for n in names}
    for start in range(0, len(seeds), chunk):
        part = seeds[start : start + chunk]
        X0, W = torch.empty(len(part), T, d), torch.empty(len(part), L, d, d)
        logits = torch.empty(len(part), L, T, T) if markov else None
        for s, seed in enumerate(part):
            _fill_shared_draws(X0[s], W[s], None if logits is None else logits[s], T, d, seed)
        X0, W = X0.to(dtype=dtype, device=device), W.to(dtype=dtype, device=device)
        if logits is not None:
            logits = logits.to(dtype=dtype, device=device)
        grams = _shared_grams([configs[i] for i in order], X0, W, logits)  # (C, L, S, T, T)
        first = _stable_ranks(X0 @ X0.mT, False)  # one X_0 for all
        later = [_stable_ranks(grams[:k], True), _stable_ranks(grams[k:], False)]
        for name, at_0, *after in zip(SHARED_METRICS, first, *later, strict=True):
            if name in names:
                value = torch.cat([at_0.expand(len(configs), 1, -1), torch.cat(after)], 1)
                out[name][order, :, start : start + len(part)] = value.cpu()
    return out


# ---------------------------------------------------------------------------------------
# Sweeps over the width: the README grid and Figs. X-XI


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


@torch.inference_mode()
def first_layer(config: GapConfig, seeds: int | Sequence[int] = 0) -> dict[str, torch.Tensor]:
    """X_0, the first layer's attention A (as drawn, before the fix), W and the output X_1, batched
    over seeds.

    Why: to look inside the layer that `simulate` ran (with its very draws), e.g. how large
    the attention branch A⊥ X W is next to the skip X in the Xavier "trap".
    """
    seeds = rng.check_seeds(seeds)
    X0, gens = zip(*(input_and_generator(config, s) for s in seeds), strict=True)
    X0 = torch.stack(X0)
    draws = stacked_draws([config], gens, [second_map_generator(s) for s in seeds])
    A = config_attention(config, X0, draws, 1)
    return {"X0": X0, "A": A, "W": draws["W"], "X1": gap_layer(X0, A, draws["W"], config)}


@torch.inference_mode()
def first_maps(configs: Sequence[GapConfig], seed: int, device=None) -> list[torch.Tensor]:
    """The first layer's attention map (T, T) of each configuration, after the fix, for one seed:
    the very maps `simulate` and `first_layer` use.

    Why: the spectra of the maps at T in the thousands, where a matrix is 128 MB: one seed
    at a time, one draw shared by every configuration of the same attention kind. For Markov
    maps X_0 does not enter, so its Gaussian is drawn (to keep the stream) but not factored.
    """
    configs = _check_configs(configs)
    seed = rng.check_seeds(seed)
    if len(seed) != 1:
        raise ParameterError(f"seed must be one int, got {seed}")
    out = [None] * len(configs)
    for kind in dict.fromkeys(c.attention for c in configs):
        index = [i for i, c in enumerate(configs) if c.attention == kind]
        group = [configs[i] for i in index]
        if kind in KEYQUERY:
            X0, g = input_and_generator(group[0], seed[0])
        else:
            g = rng.generator(seed[0], 0)
            n = max(group[0].T, group[0].d)
            torch.randn(n, n, generator=g, dtype=torch.float64)  # X_0's draw, not needed here
            X0 = torch.empty(group[0].T, 0, dtype=torch.float64)
        draws = stacked_draws(group, [g], [second_map_generator(seed[0])], device=device)
        X0 = X0.to(device)[None]
        for i, config in zip(index, group, strict=True):
            A = config_attention(config, X0, draws, 1)[0]
            out[i] = remove_outlier(A) if config.fix else A
    return out


# ---------------------------------------------------------------------------------------
# The free-probability limits of layer 1


def free_product_edge(gamma: float) -> float:
    """Right edge of MP(1) ⊠ MP(gamma): min over z > 0 of (1+z)^2 (1+gamma z) / z, at z = (sqrt(1+8
    gamma) - 1) / (4 gamma).

    Why: after the fix, T A⊥A⊥^T has the Marchenko-Pastur law of ratio 1 (the quarter-circle
    law of Mind the Gap), and X_0 W is a T x d Gaussian matrix (X_0 has orthonormal rows), whose
    Gram matrix has MP(gamma); the two are asymptotically free, so the squared singular values
    of X_1 = A⊥ X_0 W follow their free product, whose S-transform is 1/((1+z)(1+gamma z)).
    This is our derivation, not the paper's. gamma = 0 gives 4, gamma = 1 gives 27/4.
    """
    gamma = check_float("gamma", gamma, minimum=0.0)
    z = 1.0 if gamma == 0 else (math.sqrt(1 + 8 * gamma) - 1) / (4 * gamma)
    return (1 + z) ** 2 * (1 + gamma * z) / z


def layer1_limits(gamma: float) -> dict[str, dict[str, float]]:
    """Large-T limits of sr / T after one layer, for the fixed Markov layer and for Identity A.

    Why: a parameter-free prediction to hold the measured growth against (ours, not the
    paper's). With lambda the squared singular values normalised to mean 1,
    sr(X) / T -> 1 / lambda_max and sr(XX^T) / T -> E[lambda^2] / lambda_max^2, where
    A⊥: E[lambda^2] = 2 + gamma, lambda_max = free_product_edge(gamma);
    Identity A (X_1 = X_0 W, Gaussian): E[lambda^2] = 1 + gamma, lambda_max = (1 + sqrt(gamma))^2.
    Without the fix the outlier sigma_1 ~ 1 dominates and sr(XX^T) -> 1, sr(X) -> 2.
    """
    gamma = check_float("gamma", gamma, minimum=0.0)
    fixed, ident = free_product_edge(gamma), (1 + math.sqrt(gamma)) ** 2
    return {
        "fix": {"stable_rank": 1 / fixed, "gram_stable_rank": (2 + gamma) / fixed**2},
        "identity": {"stable_rank": 1 / ident, "gram_stable_rank": (1 + gamma) / ident**2},
    }
