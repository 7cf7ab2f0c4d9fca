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
from scipy.optimize import linear_sum_assignment

from .checks import ParameterError, check_int, check_matrix
from .free_probability import ks_distance, quarter_circle_cdf, quarter_circle_pdf  # its limit law
from .lanczos import lanczos_singular_values, top_singular_values  # its solver

__all__ = [
    "random_logits",
    "random_markov",
    "quarter_circle_pdf",
    "quarter_circle_cdf",
    "ks_distance",
    "top_singular_values",
    "lanczos_singular_values",
    "eigenvalues",
    "second_moment",
    "matched_distance",
    "logit_std",
]

_LOG2 = math.log(2.0)


def random_logits(T: int, *, generator: torch.Generator | None = None, batch=()) -> torch.Tensor:
    """The logits of `random_markov` (float64, shape (*batch, T, T)): i.i.d. N(-ln2/2, ln2).

    Why apart: the training experiment trains these logits, starting from the same draw.
    """
    T = check_int("T", T, minimum=1)
    batch = tuple(check_int("batch", b, minimum=1) for b in batch)
    G = torch.randn(*batch, T, T, generator=generator, dtype=torch.float64)
    return G.mul_(math.sqrt(_LOG2)).sub_(_LOG2 / 2)  # in place: T = 16384 is 2 GiB a copy


def random_markov(
    T: int, *, generator: torch.Generator | None = None, dtype=torch.float64, batch=(), device=None
) -> torch.Tensor:
    """Random Markov attention: T x T row-stochastic matrices, the row softmax of i.i.d.
    N(-ln2/2, ln2) logits (log-normal weights of mean 1 and variance 1 before normalising).

    Why this law: it is Mind the Gap's model of attention at initialisation, whose
    singular values show the spectral gap (sigma_1 ~ 1, the bulk ~ 2 / sqrt(T)).

    Parameters
    ----------
    T : int
        Tokens (rows and columns), at least 1.
    generator : torch.Generator, optional
        The draw's source (a CPU generator); None uses torch's global one.
    dtype : torch.dtype, default torch.float64
        The returned precision (the draw itself is float64).
    batch : tuple of int, default ()
        Leading dims: that many independent matrices.
    device : torch.device or str, optional
        Where the result is moved; drawn on the CPU first, so a seed gives the same
        matrices on every device.

    Returns
    -------
    torch.Tensor
        Shape (*batch, T, T); every row is positive and sums to 1.

    Examples
    --------
    >>> A = random_markov(4, generator=torch.Generator().manual_seed(0))
    >>> A.shape, bool(torch.allclose(A.sum(-1), torch.ones(4, dtype=torch.float64)))
    (torch.Size([4, 4]), True)
    """
    A = torch.softmax(random_logits(T, generator=generator, batch=batch), dim=-1)
    return A.to(dtype=dtype, device=device)


def eigenvalues(A: torch.Tensor) -> torch.Tensor:
    """Complex eigenvalues of each square matrix, sorted by decreasing modulus (the Perron value 1
    first for a Markov A)."""
    check_matrix("A", A, square=True)
    values = torch.linalg.eigvals(A.to(torch.float64))
    order = values.abs().argsort(dim=-1, descending=True)
    return values.gather(-1, order)


def second_moment(samples) -> float:
    """Mean of x^2 over the samples; the quarter-circle law on [0, 2] has second moment exactly
    1."""
    x = np.asarray(samples, dtype=float).ravel()
    if x.size == 0:
        raise ParameterError("samples must not be empty")
    return float(np.mean(x**2))


def matched_distance(a, b) -> float:
    """Largest |a_i - b_pi(i)| under the matching pi of the two multisets that minimises the total
    distance.

    Why: "the eigenvalues of A - (1/T) 1 1^T are those of A with 1 replaced by 0" compares two
    multisets of complex numbers; sorting complex values is fragile, an optimal matching is not.
    Leading dims are batch dims (one matching each); returns the largest over the batch.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.ndim < 1 or a.shape[-1] == 0:
        raise ParameterError(
            f"a and b must be non-empty with the same shape, got {a.shape} and {b.shape}"
        )
    worst = 0.0
    for x, y in zip(a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]), strict=True):
        cost = np.abs(x[:, None] - y[None, :])
        rows, cols = linear_sum_assignment(cost)
        worst = max(worst, float(cost[rows, cols].max()))
    return worst


def logit_std(A: torch.Tensor) -> torch.Tensor:
    """Standard deviation of log A after removing each row's mean, pooled over rows (one value per
    matrix).

    Why: log A equals the attention logits up to a per-row constant, so this is the spread of
    the logits across keys, the one number that decides whether a softmax attention matrix
    is Markov-like (spread ~ 1) or nearly uniform, (1/T) 1 1^T (spread << 1).
    """
    check_matrix("A", A)
    L = torch.log(A.to(torch.float64))
    return (L - L.mean(-1, keepdim=True)).flatten(-2).std(-1)
