"""Softmax attention and the maps read as "implicit fixes" of its spectral gap.

Mind the Gap traces rank collapse to the outlier singular value 1 of a row-stochastic
attention matrix (eigenvector the all-ones vector) above a bulk of size ~2/sqrt(T), and
reads two practical designs as implicit efforts to remove it:

    softmax       A = softmax(S)                            rows sum to 1: outlier 1
    centred       A - U, U uniform over each row's keys     rows sum to 0
                  (Ali et al. 2023)
    differential  A1 - lam * A2 (Ye et al. 2024)            rows sum to 1 - lam
    sigmoid       sigmoid(S + b), b = -log T                 rows not normalised
                  (Ramapuram et al. 2024)

Mind the Gap's own fix, A - (1/T) 1 1^T, is `attention.remove_outlier`; without a mask
centred attention is the same matrix (with a mask it subtracts each row's uniform weights
over its allowed keys, the map softmax gives at zero scores). Differential
attention follows the Differential Transformer's reference code (microsoft/unilm,
Diff-Transformer, `multihead_diffattn.py`): each of h heads splits its queries and keys
into two halves of width d / (2h), takes two softmax maps, subtracts them with a learnt
lam = exp(lam_q1 . lam_k1) - exp(lam_q2 . lam_k2) + lam_init, normalises each head's
output of width d / h by RMSNorm (eps 1e-5, gain) and scales it by (1 - lam_init).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import rng
from .attention import masked_softmax
from .checks import ParameterError, check_float, check_int, check_matrix
from .masks import check_mask

__all__ = [
    "MAPS",
    "centred_map",
    "lambda_init",
    "differential_lambda",
    "differential_map",
    "DifferentialWeights",
    "init_differential",
    "differential_attention",
    "sigmoid_map",
]

MAPS = ("softmax", "centred", "differential", "sigmoid")
SUBLN_EPS = 1e-5  # the reference code's RMSNorm of each head's output
LAMBDA_STD = 0.1  # the reference code draws lam_q1, lam_k1, lam_q2, lam_k2 from N(0, 0.1^2)


def centred_map(A: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """A - U with U each row's uniform weights over its allowed keys (1/T everywhere without a
    mask): the softmax's value at zero scores subtracted, so every row sums to 0 and the
    all-ones vector is in the kernel."""
    check_matrix("A", A, square=True)
    zeros = torch.zeros(A.shape[-2:], dtype=A.dtype, device=A.device)
    return A - masked_softmax(zeros, mask)


def lambda_init(layer: int) -> float:
    """lam_init = 0.8 - 0.6 exp(-0.3 (l - 1)) for layer l = 1, 2, ... (the paper's schedule;
    the reference code's `depth` is l - 1)."""
    layer = check_int("layer", layer, minimum=1)
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


def differential_lambda(lam_q1, lam_k1, lam_q2, lam_k2, lam_init: float) -> torch.Tensor:
    """lam = exp(lam_q1 . lam_k1) - exp(lam_q2 . lam_k2) + lam_init (over the last dim)."""
    lam_init = check_float("lam_init", lam_init)
    first = torch.exp((lam_q1 * lam_k1).sum(-1))
    return first - torch.exp((lam_q2 * lam_k2).sum(-1)) + lam_init


def differential_map(A1: torch.Tensor, A2: torch.Tensor, lam) -> torch.Tensor:
    """A1 - lam A2: for row-stochastic A1, A2 it keeps the eigenvector 1, with eigenvalue
    1 - lam. lam: a float or a tensor broadcasting against the batch dims."""
    check_matrix("A1", A1, square=True)
    if A1.shape[-2:] != A2.shape[-2:]:
        raise ParameterError(f"A2 must be {tuple(A1.shape[-2:])} like A1, got {tuple(A2.shape)}")
    lam = torch.as_tensor(lam, dtype=A1.dtype, device=A1.device)
    return A1 - lam[..., None, None] * A2


@dataclass(frozen=True)
class DifferentialWeights:
    """One differential-attention layer: projections (d, d) acting on the right, the four
    lam vectors (d / (2h),), the heads' RMSNorm gain (d / h,) and lam_init."""

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    lam_q1: torch.Tensor
    lam_k1: torch.Tensor
    lam_q2: torch.Tensor
    lam_k2: torch.Tensor
    subln_weight: torch.Tensor
    lam_init: float


def _head_dim(d: int, n_heads: int) -> int:
    d, n_heads = check_int("d", d, minimum=2), check_int("n_heads", n_heads, minimum=1)
    if d % (2 * n_heads):
        raise ParameterError(f"d must be a multiple of 2 * n_heads = {2 * n_heads}, got {d}")
    return d // (2 * n_heads)


def init_differential(d: int, n_heads: int, layer: int, seed: int = 0) -> DifferentialWeights:
    """The reference code's initialisation of layer `layer` (1-based), in float64:
    projections by PyTorch's linear default U(+-1/sqrt(fan-in)), lam vectors N(0, 0.1^2),
    RMSNorm gain 1; each tensor from its own stream (seed, layer, role)."""
    head_dim = _head_dim(d, n_heads)
    lam0 = lambda_init(layer)

    def uniform(role: int, fan_in: int, shape) -> torch.Tensor:
        g = rng.generator(seed, layer, role)
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) / math.sqrt(fan_in)

    def normal(role: int) -> torch.Tensor:
        g = rng.generator(seed, layer, role)
        return torch.randn(head_dim, generator=g, dtype=torch.float64) * LAMBDA_STD

    return DifferentialWeights(
        *(uniform(role, d, (d, d)) for role in range(4)),
        *(normal(role) for role in range(4, 8)),
        subln_weight=torch.ones(2 * head_dim, dtype=torch.float64),
        lam_init=lam0,
    )


def differential_attention(
    X: torch.Tensor, w: DifferentialWeights, n_heads: int, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One differential-attention layer on X (..., T, d); returns (output (..., T, d), the
    heads' maps A1 - lam A2 (..., h, T, T)). Scores are divided by sqrt(d / (2h))."""
    check_matrix("X", X)
    T, d = X.shape[-2:]
    head_dim = _head_dim(d, n_heads)
    q = (X @ w.W_Q).unflatten(-1, (2 * n_heads, head_dim)).transpose(-3, -2)
    k = (X @ w.W_K).unflatten(-1, (2 * n_heads, head_dim)).transpose(-3, -2)
    v = (X @ w.W_V).unflatten(-1, (n_heads, 2 * head_dim)).transpose(-3, -2)
    S = (q / math.sqrt(head_dim)) @ k.transpose(-1, -2)  # (..., 2h, T, T)
    A = masked_softmax(S, None if mask is None else mask.unsqueeze(-3)).unflatten(-3, (n_heads, 2))
    lam = differential_lambda(w.lam_q1, w.lam_k1, w.lam_q2, w.lam_k2, w.lam_init)
    maps = differential_map(A[..., 0, :, :], A[..., 1, :, :], lam)
    heads = maps @ v  # (..., h, T, 2 head_dim)
    rms = torch.sqrt(heads.pow(2).mean(-1, keepdim=True) + SUBLN_EPS)
    heads = heads / rms * w.subln_weight * (1 - w.lam_init)
    return heads.transpose(-3, -2).flatten(-2) @ w.W_O, maps


def sigmoid_map(S: torch.Tensor, mask: torch.Tensor | None = None, bias=None) -> torch.Tensor:
    """sigmoid(S + b) with b = -log T by default (T keys): each row's weights are
    independent, not normalised; forbidden entries are exactly 0."""
    check_matrix("scores", S)
    b = -math.log(S.shape[-1]) if bias is None else check_float("bias", bias)
    A = torch.sigmoid(S + b)
    if mask is None:
        return A
    if check_mask(mask).shape[-2:] != S.shape[-2:]:
        raise ParameterError(
            f"mask shape {tuple(mask.shape)} does not match scores {tuple(S.shape)}"
        )
    return A.masked_fill(~mask, 0.0)
