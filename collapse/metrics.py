"""Measures of token collapse, batched over leading dims, computed in float64.

float64 matters: in float32, X - mean(X) cancels at ~1e-7 relative and draws a false
floor under every collapse curve (see the book's Methods page, "Double precision").
"""

from __future__ import annotations

import math

import torch

from .checks import ParameterError, check_matrix

__all__ = [
    "mu",
    "relative_mu",
    "frobenius",
    "squared_singular_values",
    "stable_rank",
    "gram_stable_rank",
    "mean_abs_cos",
    "numerical_rank",
    "sigma_min",
    "METRICS",
    "check_metric_names",
    "evaluate",
]


def _f64(X: torch.Tensor) -> torch.Tensor:
    check_matrix("X", X)
    return X.to(torch.float64)


def mu(X: torch.Tensor) -> torch.Tensor:
    """mu(X) = ||X - 1 mean(X)||_F: how far the tokens are from their common mean, Wu et al.'s
    measure of rank collapse (zero exactly when every token is the same vector).

    Parameters
    ----------
    X : torch.Tensor
        Shape (..., N, d): N tokens of width d, batched over any leading dims.

    Returns
    -------
    torch.Tensor
        Shape (...), float64 (X - mean cancels at 1e-7 relative in float32).

    Examples
    --------
    >>> mu(torch.tensor([[1.0, 2.0], [3.0, 4.0]])).item()
    2.0
    """
    X = _f64(X)
    return torch.linalg.vector_norm(X - X.mean(-2, keepdim=True), dim=(-2, -1))


def frobenius(X: torch.Tensor) -> torch.Tensor:
    """||X||_F over the last two dims."""
    return torch.linalg.vector_norm(_f64(X), dim=(-2, -1))


def relative_mu(X: torch.Tensor) -> torch.Tensor:
    """mu(X) / ||X||_F: collapse separated from a shrinking overall scale."""
    return mu(X) / frobenius(X)


def _singular_values(X: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(_f64(X))


def squared_singular_values(X: torch.Tensor) -> torch.Tensor:
    """sigma_i^2 of X (ascending), from the eigenvalues of the smaller Gram matrix; NaN for a zero
    or non-finite X.

    Why: batched svdvals of wide matrices (150 x 750) is ~20x slower here than eigvalsh of
    the 150 x 150 Gram matrix, and the stable ranks only need the large sigma, whose error is
    ~1e-16 sigma_1^2 either way. X is first divided by its largest entry (stable ranks are
    scale-free), so sigma^4 cannot overflow even in deep runs with unscaled weights.
    """
    X = _f64(X)
    scale = X.abs().amax(dim=(-2, -1), keepdim=True)
    bad = ~torch.isfinite(scale) | (scale == 0)
    Xn = torch.where(bad, 0.0, X) / torch.where(bad, 1.0, scale)
    G = Xn @ Xn.transpose(-1, -2) if X.shape[-2] <= X.shape[-1] else Xn.transpose(-1, -2) @ Xn
    lam = torch.linalg.eigvalsh(G).clamp_min(0)
    return torch.where(bad[..., 0], math.nan, lam)


def _stable_rank_from(lam: torch.Tensor, power: int) -> torch.Tensor:
    """sum sigma^(2 power) / sigma_1^(2 power) from ascending squared singular values."""
    return (lam**power).sum(-1) / lam[..., -1] ** power


def stable_rank(X: torch.Tensor) -> torch.Tensor:
    """||X||_F^2 / ||X||_2^2 = sum sigma_i^2 / sigma_1^2 (Wu et al., App. F.2): a rank that
    counts only directions of comparable size, 1 for a collapsed X.

    Parameters
    ----------
    X : torch.Tensor
        Shape (..., N, d), batched over leading dims.

    Returns
    -------
    torch.Tensor
        Shape (...), float64, in [1, min(N, d)]; NaN for a zero or non-finite X.

    Examples
    --------
    >>> stable_rank(torch.eye(3)).item()
    3.0
    """
    return _stable_rank_from(squared_singular_values(X), 1)


def gram_stable_rank(X: torch.Tensor) -> torch.Tensor:
    """Stable rank of X X^T, sum sigma^4 / sigma_1^4: the definition of the Mind-the-Gap code."""
    return _stable_rank_from(squared_singular_values(X), 2)


def mean_abs_cos(X: torch.Tensor) -> torch.Tensor:
    """Mean over ordered pairs i != j of |cos(x_i, x_j)| (Wu et al., Fig. 4)."""
    X = _f64(X)
    n = X.shape[-2]
    if n < 2:
        raise ParameterError(f"mean_abs_cos needs at least 2 tokens, got {n}")
    unit = X / torch.linalg.vector_norm(X, dim=-1, keepdim=True)
    cos = (unit @ unit.transpose(-1, -2)).abs()
    off_diagonal = cos.sum((-2, -1)) - cos.diagonal(dim1=-2, dim2=-1).sum(-1)
    return off_diagonal / (n * (n - 1))


def _rank_from(s: torch.Tensor, shape, rtol: float | None) -> torch.Tensor:
    if rtol is None:
        rtol = max(shape[-2:]) * torch.finfo(torch.float64).eps
    return (s > rtol * s[..., :1]).sum(-1)


def numerical_rank(X: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    """Number of singular values above rtol * sigma_1 (default: max(n, d) * float64 eps)."""
    return _rank_from(_singular_values(X), X.shape, rtol)


def sigma_min(X: torch.Tensor) -> torch.Tensor:
    """Smallest of the min(n, d) singular values."""
    return _singular_values(X)[..., -1]


METRICS = {
    "mu": mu,
    "relative_mu": relative_mu,
    "frobenius": frobenius,
    "stable_rank": stable_rank,
    "gram_stable_rank": gram_stable_rank,
    "mean_abs_cos": mean_abs_cos,
    "numerical_rank": numerical_rank,
    "sigma_min": sigma_min,
}

_FROM_GRAM = {
    "stable_rank": lambda lam: _stable_rank_from(lam, 1),
    "gram_stable_rank": lambda lam: _stable_rank_from(lam, 2),
}
_FROM_SVD = {
    "numerical_rank": lambda s, shape: _rank_from(s, shape, None),
    "sigma_min": lambda s, shape: s[..., -1],
}


def check_metric_names(names, allowed=None) -> tuple[str, ...]:
    """Return `names` as a tuple, raising on any name not in `allowed` (default: METRICS)."""
    allowed = tuple(METRICS if allowed is None else allowed)
    names = (names,) if isinstance(names, str) else tuple(names)
    for name in names:
        if name not in allowed:
            raise ParameterError(f"metric must be one of {', '.join(allowed)}; got {name!r}")
    return names


def evaluate(X: torch.Tensor, names) -> dict[str, torch.Tensor]:
    """Several metrics of X at once, sharing one Gram eigendecomposition and one SVD between the
    spectral ones."""
    names = check_metric_names(names)
    lam = squared_singular_values(X) if any(n in _FROM_GRAM for n in names) else None
    s = _singular_values(X) if any(n in _FROM_SVD for n in names) else None
    values = {}
    for n in names:
        if n in _FROM_GRAM:
            values[n] = _FROM_GRAM[n](lam)
        elif n in _FROM_SVD:
            values[n] = _FROM_SVD[n](s, X.shape)
        else:
            values[n] = METRICS[n](X)
    return values
