"""Masked softmax attention, the LayerNorm flavours (scale-only, centred, RMSNorm) and the
outlier-removal fix.

Shapes follow torch: leading dims are batch dims and broadcast; the last two dims are
(tokens, features) for X and (queries, keys) for scores and attention matrices.
"""

from __future__ import annotations

import math

import torch

from .checks import ParameterError, check_float, check_matrix
from .masks import check_mask

__all__ = [
    "temperature_scale",
    "scores",
    "masked_softmax",
    "attention_matrix",
    "scale_layernorm",
    "centered_layernorm",
    "rms_layernorm",
    "LAYERNORMS",
    "remove_outlier",
]


def temperature_scale(d_qk, like: torch.Tensor, extra_dims: int):
    """sqrt(d_qk) as a float, or as a tensor over batch dims with `extra_dims` trailing 1s.

    Validates d_qk (> 0 everywhere); `like` gives the tensor's dtype and device.
    """
    if isinstance(d_qk, torch.Tensor):
        if bool((d_qk <= 0).any()):
            raise ParameterError("d_qk must be > 0 everywhere")
        return d_qk.to(like).reshape(d_qk.shape + (1,) * extra_dims).sqrt()
    return math.sqrt(check_float("d_qk", d_qk, positive=True))


def scores(Q: torch.Tensor, K: torch.Tensor, d_qk=None) -> torch.Tensor:
    """Q K^T / sqrt(d_qk); d_qk (default: the key width; a float or a tensor over batch dims) is a
    temperature."""
    scale = math.sqrt(Q.shape[-1]) if d_qk is None else temperature_scale(d_qk, Q, 2)
    return Q @ K.transpose(-1, -2) / scale


def masked_softmax(S: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Row softmax over allowed entries only; forbidden entries are exactly 0.

    Forbidden scores are set to -inf before the softmax (never to a large negative
    number, which would leak weight). A row with no allowed entry is a ValueError.
    """
    check_matrix("scores", S)
    if mask is None:
        return torch.softmax(S, dim=-1)
    check_mask(mask)
    if mask.shape[-2:] != S.shape[-2:]:
        raise ParameterError(
            f"mask shape {tuple(mask.shape)} does not match scores shape {tuple(S.shape)}"
        )
    return torch.softmax(S.masked_fill(~mask, -math.inf), dim=-1)


def attention_matrix(X, W_Q, W_K, mask=None, d_qk=None) -> torch.Tensor:
    """Single-head attention A(X) = softmax(X W_Q (X W_K)^T / sqrt(d_qk)) under `mask`."""
    check_matrix("X", X)
    if X.shape[-1] != W_Q.shape[-2] or X.shape[-1] != W_K.shape[-2]:
        raise ParameterError(
            f"W_Q and W_K must have {X.shape[-1]} rows to match X, got {tuple(W_Q.shape)}, "
            f"{tuple(W_K.shape)}"
        )
    return masked_softmax(scores(X @ W_Q, X @ W_K, d_qk), mask)


def scale_layernorm(X: torch.Tensor) -> torch.Tensor:
    """The theory's LayerNorm: each token divided by its Euclidean norm (no centring, gain or
    sqrt(d))."""
    return X / torch.linalg.vector_norm(X, dim=-1, keepdim=True)


def centered_layernorm(X: torch.Tensor, eps: float = 1e-5, weight=None, bias=None) -> torch.Tensor:
    """Standard LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias, per token."""
    return torch.nn.functional.layer_norm(X, X.shape[-1:], weight, bias, eps)


def rms_layernorm(X: torch.Tensor, eps: float = 0.0, weight=None) -> torch.Tensor:
    """RMSNorm (Zhang and Sennrich 2019): x / sqrt(mean(x^2) + eps) * weight, per token.

    Why: with eps = 0 and no weight it is sqrt(d) times the theory's scale-only LayerNorm,
    x / ||x||_2; the gain `weight` (d,) is what RMSNorm adds to it.
    """
    eps = check_float("eps", eps, minimum=0.0)
    Y = X / torch.sqrt(X.pow(2).mean(-1, keepdim=True) + eps)
    return Y if weight is None else Y * weight


LAYERNORMS = {"scale": scale_layernorm, "centered": centered_layernorm, "rms": rms_layernorm}


def remove_outlier(A: torch.Tensor) -> torch.Tensor:
    """The Mind-the-Gap fix A - (1/T) 1 1^T: deflates the eigenvalue 1 of a row-stochastic A to
    0."""
    check_matrix("A", A, square=True)
    return A - 1.0 / A.shape[-1]
