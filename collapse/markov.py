"""Random Markov attention (the Mind-the-Gap model) and its singular-value spectrum.

A = D^-1 E with E_ij = exp(G_ij), G_ij ~ N(-ln2/2, ln2) i.i.d., so E_ij is log-normal
with mean 1 and variance 1 and A is a row softmax of G. sigma_1(A) ~ 1, while the
bulk sqrt(T) sigma_i(A), i >= 2, follows the quarter-circle law on [0, 2]: the gap
sigma_2 / sigma_1 ~ 2 / sqrt(T) is what causes rank collapse in width.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.sparse.linalg import svds

from .checks import ParameterError, check_choice, check_int, check_matrix

__all__ = [
    "random_markov",
    "quarter_circle_pdf",
    "quarter_circle_cdf",
    "ks_distance",
    "top_singular_values",
]

_LOG2 = math.log(2.0)


def random_markov(T: int, *, generator: torch.Generator | None = None, dtype=torch.float64, batch=(), device=None) -> torch.Tensor:
    """T x T row-stochastic matrices (shape (*batch, T, T)): row softmax of N(-ln2/2, ln2) entries.

    Drawn on the generator's device (the CPU by default) and then moved, so a seed
    gives the same matrices on every device.
    """
    T = check_int("T", T, minimum=1)
    batch = tuple(check_int("batch", b, minimum=1) for b in batch)
    G = torch.randn(*batch, T, T, generator=generator, dtype=torch.float64)
    A = torch.softmax(G * math.sqrt(_LOG2) - _LOG2 / 2, dim=-1)
    return A.to(dtype=dtype, device=device)


def quarter_circle_pdf(x):
    """Density (1/pi) sqrt(4 - x^2) on [0, 2], zero elsewhere."""
    x = np.asarray(x, dtype=float)
    inside = (x >= 0) & (x <= 2)
    return np.where(inside, np.sqrt(np.clip(4 - x**2, 0, None)) / np.pi, 0.0)


def quarter_circle_cdf(x):
    """F(x) = (x sqrt(4 - x^2) / 2 + 2 arcsin(x / 2)) / pi on [0, 2]; 0 below, 1 above."""
    x = np.clip(np.asarray(x, dtype=float), 0.0, 2.0)
    return (x * np.sqrt(4 - x**2) / 2 + 2 * np.arcsin(x / 2)) / np.pi


def ks_distance(samples) -> float:
    """Kolmogorov-Smirnov distance between the samples' empirical CDF and the quarter-circle law."""
    x = np.sort(np.asarray(samples, dtype=float).ravel())
    if x.size == 0:
        raise ParameterError("samples must not be empty")
    F = quarter_circle_cdf(x)
    n = x.size
    return float(max((np.arange(1, n + 1) / n - F).max(), (F - np.arange(n) / n).max()))


def _svds_top(matrix: np.ndarray, k: int) -> np.ndarray:
    values = svds(matrix, k=k, which="LM", return_singular_vectors=False, tol=0, random_state=0)
    return np.sort(values)[::-1]


def top_singular_values(A: torch.Tensor, k: int, *, method: str = "auto") -> torch.Tensor:
    """The k largest singular values of each matrix (shape (..., k), descending).

    method: "full" (dense SVD), "iterative" (ARPACK Lanczos via scipy, float64, to
    machine precision; for k well below min(m, n)), or "auto" (iterative when the
    matrices are large and k small).
    """
    check_matrix("A", A)
    k = check_int("k", k, minimum=1)
    method = check_choice("method", method, ("auto", "full", "iterative"))
    smallest = min(A.shape[-2:])
    if k > smallest:
        raise ParameterError(f"k must be at most min(rows, cols) = {smallest}, got {k}")
    if method == "auto":
        method = "iterative" if smallest >= 512 and 4 * k < smallest else "full"
    if method == "full":
        return torch.linalg.svdvals(A)[..., :k]
    if k >= smallest:
        raise ParameterError(f"method 'iterative' needs k < min(rows, cols) = {smallest}, got {k}")
    flat = A.detach().to("cpu", torch.float64).reshape(-1, *A.shape[-2:]).numpy()
    values = np.stack([_svds_top(m, k) for m in flat])
    return torch.from_numpy(values).reshape(*A.shape[:-2], k).to(A.device)
