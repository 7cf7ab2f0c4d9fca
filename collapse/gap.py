"""The Mind-the-Gap model: attention-only stacks at initialisation and rank collapse in width.

Following the official code of Nait Saada, Naderi & Tanner (PAPERS.md M3-M5):

    X_l = A_l X_{l-1} W_l          W_l ~ N(0, 1) entrywise, no 1/sqrt(d)
    +skip:  X_l = X_{l-1} + A_l X_{l-1} W_l      (one residual; the official block adds it twice, D10)
    +LN:    nn.LayerNorm(d) (centred, eps 1e-5, no affine) applied last, post-LN
    fix:    A_l replaced by A_l - (1/T) 1 1^T, which removes the outlier eigenvalue 1

A_l is a fresh random Markov matrix per layer ("markov"), the identity ("identity"),
or key-query attention softmax(X W_Q (X W_K)^T / sqrt(d)) with W_Q, W_K drawn Xavier
("xavier": N(0, 1/d), the official configs) or N(0, 1) ("normal", the official
notebook). X_0 is isometric. Everything runs in float64 (D6): the unscaled N(0, 1)
weights grow X by ~sqrt(d) per layer, which overflows float32 within ~9 layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from . import metrics as _metrics
from .attention import remove_outlier
from .checks import ParameterError, check_choice, check_int
from .markov import random_markov

__all__ = ["ATTENTIONS", "GapConfig", "isometric_input", "seed_generator", "attention_matrices", "gap_layer", "simulate"]

ATTENTIONS = ("markov", "identity", "xavier", "normal")


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

    def __post_init__(self):
        check_int("T", self.T, minimum=1)
        check_int("d", self.d, minimum=1)
        check_int("n_layers", self.n_layers, minimum=0)
        check_choice("attention", self.attention, ATTENTIONS)

    @property
    def label(self) -> str:
        """Short name in the paper's style: A, A⊥+skip+LN, Identity A, A(X) (xavier)..."""
        base = {"markov": "A", "identity": "Identity A", "xavier": "A(X) xavier", "normal": "A(X) N(0,1)"}[self.attention]
        return base + ("⊥" if self.fix else "") + ("+skip" if self.skip else "") + ("+LN" if self.layernorm else "")


def seed_generator(seed: int, stream: int = 0) -> torch.Generator:
    """A CPU generator for (seed, stream): independent streams per seed and purpose."""
    state = np.random.SeedSequence([check_int("seed", seed, minimum=0), stream]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def isometric_input(T: int, d: int, *, generator: torch.Generator | None = None, dtype=torch.float64) -> torch.Tensor:
    """T x d with orthonormal rows (T <= d) or columns (T > d): a slice of a Haar orthogonal matrix."""
    n = max(check_int("T", T, minimum=1), check_int("d", d, minimum=1))
    q, r = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r)))[:T, :d].to(dtype)


def _keyquery(X: torch.Tensor, g: torch.Generator, std: float) -> torch.Tensor:
    d = X.shape[-1]
    W_Q = torch.randn(*X.shape[:-2], d, d, generator=g, dtype=torch.float64) * std
    W_K = torch.randn(*X.shape[:-2], d, d, generator=g, dtype=torch.float64) * std
    return torch.softmax((X @ W_Q) @ (X @ W_K).transpose(-1, -2) / math.sqrt(d), dim=-1)


def attention_matrices(X: torch.Tensor, kind: str, g: torch.Generator) -> torch.Tensor:
    """This layer's attention for a batch X (..., T, d), drawn from g (identity draws nothing)."""
    T, d = X.shape[-2:]
    if kind == "markov":
        return random_markov(T, generator=g, batch=X.shape[:-2])
    if kind == "identity":
        return torch.eye(T, dtype=torch.float64).expand(*X.shape[:-2], T, T)
    return _keyquery(X, g, 1 / math.sqrt(d) if kind == "xavier" else 1.0)


def gap_layer(X: torch.Tensor, A: torch.Tensor, W: torch.Tensor, config: GapConfig) -> torch.Tensor:
    """One layer given its attention A and value weights W (differentiable: gradients use it)."""
    if config.fix:
        A = remove_outlier(A)
    Y = A @ X @ W
    if config.skip:
        Y = X + Y
    if config.layernorm:
        Y = torch.nn.functional.layer_norm(Y, Y.shape[-1:], eps=1e-5)
    return Y


def _check_seeds(seeds) -> list[int]:
    seeds = [seeds] if isinstance(seeds, int) else list(seeds)
    if not seeds:
        raise ParameterError("seeds must name at least one seed")
    return [check_int("seed", s, minimum=0) for s in seeds]


@torch.inference_mode()
def simulate(config: GapConfig, seeds: int | Sequence[int] = 0, *, metrics=("gram_stable_rank",)) -> dict[str, torch.Tensor]:
    """Per-layer metrics (L+1, n_seeds) of the stack, one independent network and input per seed.

    Seed s draws X_0, then each layer's attention and W_l, from its own generator, so a
    run is the same whether its seed is computed alone or in a batch. A layer whose
    output is exactly zero (A(X)-fix with Xavier weights can get there) gives NaN ratios.
    """
    names = _metrics.check_metric_names(metrics)
    seeds = _check_seeds(seeds)
    gens = [seed_generator(s) for s in seeds]
    X = torch.stack([isometric_input(config.T, config.d, generator=g) for g in gens])
    history = {name: [value] for name, value in _metrics.evaluate(X, names).items()}
    for _ in range(config.n_layers):
        A = torch.stack([attention_matrices(X[i], config.attention, g) for i, g in enumerate(gens)])
        W = torch.stack([torch.randn(config.d, config.d, generator=g, dtype=torch.float64) for g in gens])
        X = gap_layer(X, A, W, config)
        for name, value in _metrics.evaluate(X, names).items():
            history[name].append(value)
    return {name: torch.stack(values).to(torch.float64) for name, values in history.items()}
