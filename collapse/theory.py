"""The collapse bounds of Wu et al. (Theorem 1, Theorem 2, Corollary 1) and their epsilon.

Each bound has the form mu(X_t) <= C * q^(t / k): we expose the per-layer rate
log(q) / k (the slope of log mu against t that the theorem guarantees) and the bound
itself. epsilon is the smallest attention weight on any edge of the mask graph, over
all layers; `epsilon` estimates it from the attention matrices a run actually used.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .checks import ParameterError, check_float, check_int

__all__ = [
    "epsilon",
    "theorem1_rate",
    "theorem1_bound",
    "theorem2_rate",
    "theorem2_bound",
    "corollary1_rate",
    "corollary1_bound",
]


def epsilon(A: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Smallest entry of each attention matrix on the allowed edges (min over the last two dims)."""
    if mask is not None:
        A = A.masked_fill(~mask, math.inf)
    return A.amin(dim=(-2, -1))


def _check(eps, r) -> tuple[float, int]:
    eps = check_float("eps", eps, positive=True)
    if eps > 1:
        raise ParameterError(f"eps must be in (0, 1] (an attention weight), got {eps}")
    if isinstance(r, float) and math.isinf(r):
        raise ParameterError("r must be a finite int >= 1: the bounds need a quasi-strongly connected mask")
    return eps, check_int("r", r, minimum=1)


def _bound(t, rate: float, C: float):
    return C * np.exp(np.asarray(t, dtype=float) * rate)


def theorem1_rate(eps: float, r: int) -> float:
    """log(1 - eps^r) / r: Theorem 1's guaranteed slope of log mu per layer (pure attention)."""
    eps, r = _check(eps, r)
    return math.log1p(-(eps**r)) / r if eps < 1 else -math.inf


def theorem1_bound(t, eps: float, r: int, C: float = 1.0):
    """C (1 - eps^r)^(t / r) at layers t (array-like)."""
    return _bound(t, theorem1_rate(eps, r), C)


def theorem2_rate(eps: float, r: int, N: int) -> float:
    """log(1 - N eps^(2r)) / (2r): Theorem 2 (scale-only LN, orthogonal W_V, strongly connected, N eps < 1)."""
    eps, r = _check(eps, r)
    N = check_int("N", N, minimum=1)
    if N * eps >= 1:
        raise ParameterError(f"Theorem 2 needs N * eps < 1, got N={N}, eps={eps}")
    return math.log1p(-N * eps ** (2 * r)) / (2 * r)


def theorem2_bound(t, eps: float, r: int, N: int, C: float = 1.0):
    """C (1 - N eps^(2r))^(t / (2r)) at layers t."""
    return _bound(t, theorem2_rate(eps, r, N), C)


def corollary1_rate(eps: float, r: int, n_centers: int = 1) -> float:
    """log(1 - n eps^(2r)) / (2r): Corollary 1 (quasi-strongly connected, non-negative initial cosines)."""
    eps, r = _check(eps, r)
    n_centers = check_int("n_centers", n_centers, minimum=1)
    q = n_centers * eps ** (2 * r)
    if q >= 1:
        raise ParameterError(f"Corollary 1 needs n_centers * eps^(2r) < 1, got {q}")
    return math.log1p(-q) / (2 * r)


def corollary1_bound(t, eps: float, r: int, n_centers: int = 1, C: float = 1.0):
    """C (1 - n eps^(2r))^(t / (2r)) at layers t."""
    return _bound(t, corollary1_rate(eps, r, n_centers), C)
