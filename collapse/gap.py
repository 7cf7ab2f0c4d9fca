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
kind share them). A seed's numbers never depend on which other seeds or configurations share
its batch: every seed draws from its own generator, in the same order as a lone run.

This module holds the model and its reference engine (`simulate_many`, float64, one draw
per layer and seed); `gap_shared` the fast float32 engine for Markov and identity stacks,
`gap_width` the sweeps over (gamma, T) cells and `free_probability` the large-T limits they
are held against. Their public names are re-exported here, so `gap.width_sweep` works.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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


# The fast engine, the width sweeps and the layer-1 limits live in modules of their own; their
# names stay reachable from here (imported last: those modules build on the model above).
from .free_probability import free_product_edge, layer1_limits  # noqa: E402
from .gap_shared import SHARED_METRICS, shared_draws, simulate_shared  # noqa: E402
from .gap_width import fig7_variants, width_for, width_sweep, width_sweep_flops  # noqa: E402
