"""Measures of token collapse, batched over leading dims, computed in float64.

float64 matters: in float32, X - mean(X) cancels at ~1e-7 relative and draws a false
floor under every collapse curve (see the book's Methods page, "Double precision").
"""

from __future__ import annotations

import math

import torch

from .checks import ParameterError, check_int, check_matrix

__all__ = [
    "MU_ZERO",
    "mu",
    "relative_mu",
    "frobenius",
    "squared_singular_values",
    "stable_rank",
    "gram_stable_rank",
    "mean_abs_cos",
    "one_minus_cos",
    "one_minus_min_cos",
    "mean_one_minus_cos",
    "numerical_rank",
    "sigma_min",
    "res",
    "res_constants",
    "METRICS",
    "check_metric_names",
    "evaluate",
]


# mu = 0 exactly (bitwise identical tokens) is recorded as MU_ZERO, just below the float64
# floor, so that log mu stays finite and such a collapse is drawn at the bottom of a plot.
MU_ZERO = 1e-17


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


def one_minus_cos(X: torch.Tensor) -> torch.Tensor:
    """1 - cos(x_i, x_j) for every pair of tokens, accurate however close the tokens are.

    Why: 1 - <x_i, x_j> / (|x_i| |x_j|) rounds to 0 once the angle is below about 1e-8, so
    it cannot follow tokens that collapse to the float64 floor. The exact identity
    1 - cos = (|x_i - x_j|^2 - (|x_i| - |x_j|)^2) / (2 |x_i| |x_j|), computed from the
    differences themselves, keeps its relative precision down to the floor of the
    differences.

    Parameters
    ----------
    X : torch.Tensor
        Shape (..., N, d), batched over leading dims; no zero token.

    Returns
    -------
    torch.Tensor
        Shape (..., N, N), float64, in [0, 2], zero on the diagonal (NaN next to a zero token).

    Examples
    --------
    >>> one_minus_cos(torch.tensor([[1.0, 0.0], [0.0, 2.0]])).round(decimals=12).tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    >>> f"{one_minus_cos(torch.tensor([[1.0, 0.0], [1.0, 1e-10]]))[0, 1].item():.3g}"
    '5e-21'
    """
    X = _f64(X)
    norm = torch.linalg.vector_norm(X, dim=-1)
    distance = torch.cdist(X, X, compute_mode="donot_use_mm_for_euclid_dist")
    gap = norm[..., :, None] - norm[..., None, :]  # |gap| <= distance (triangle inequality)
    squared = (distance - gap) * (distance + gap)  # |x_i - x_j|^2 - (|x_i| - |x_j|)^2
    return (squared / (2 * norm[..., :, None] * norm[..., None, :])).clamp_min(0)


def _pairs(X: torch.Tensor, name: str) -> torch.Tensor:
    if X.shape[-2] < 2:
        raise ParameterError(f"{name} needs at least 2 tokens, got {X.shape[-2]}")
    return one_minus_cos(X)


def one_minus_min_cos(X: torch.Tensor) -> torch.Tensor:
    """1 - min_{i != j} cos(x_i, x_j): 0 exactly when every token points the same way.

    For unit tokens (LayerNorm's), with g this number and N tokens,
    2 g / N <= mu(X)^2 <= (N - 1) g: mu -> 0 exactly when the smallest cosine -> 1.

    Examples
    --------
    >>> one_minus_min_cos(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])).item()
    2.0
    """
    return _pairs(X, "one_minus_min_cos").amax(dim=(-2, -1))


def mean_one_minus_cos(X: torch.Tensor) -> torch.Tensor:
    """Mean of 1 - cos(x_i, x_j) over ordered pairs i != j.

    For unit tokens mu(X)^2 = (N - 1) times this, exactly: mu^2 = sum_i |x_i - m|^2
    = (1 / 2N) sum_{i, j} |x_i - x_j|^2 and |x_i - x_j|^2 = 2 (1 - cos) on the sphere.

    Examples
    --------
    >>> X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    >>> round(2 * mean_one_minus_cos(X).item(), 12), round(mu(X).item() ** 2, 12)
    (2.666666666667, 2.666666666667)
    """
    gaps = _pairs(X, "mean_one_minus_cos")
    n = X.shape[-2]
    return gaps.sum(dim=(-2, -1)) / (n * (n - 1))


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


def res_constants(N: int, d: int) -> tuple[float, float]:
    """(c1, c2) with c1 mu(X) <= res(X) <= c2 mu(X) for every N x d input X (N >= 2).

    c1 = 1 / sqrt(min(N - 1, d)): for B = X - 1 x^T at Dong et al.'s minimiser,
    res = ||B||_{1,inf} >= ||B||_2 >= ||P B||_2 (P removes the mean token, so P B = X - 1
    mean^T) >= mu / sqrt(rank), and that rank is at most min(N - 1, d); the identity tokens
    attain it. c2 = (N d)^(1/4): res <= ||X - 1 mean^T||_{1,inf}, and a column sum of N
    entries is at most sqrt(N) times their 2-norm, a row sum of d at most sqrt(d) times.

    Examples
    --------
    >>> res_constants(5, 16)
    (0.5, 2.990697562442441)
    """
    N, d = (check_int(k, v, minimum=2 if k == "N" else 1) for k, v in (("N", N), ("d", d)))
    return 1 / math.sqrt(min(N - 1, d)), (N * d) ** 0.25


def _residual_lp(R):
    """A solver of min over x of alpha f(x) + beta g(x), f the largest column sum and g the
    largest row sum of |R - 1 x^T|: returns (f, g) at the optimum x, evaluated exactly.

    The linear program: x, U >= |R - 1 x^T| entrywise, F >= every column sum of U, G >=
    every row sum; minimise alpha F + beta G."""
    import numpy as np
    from scipy import optimize, sparse

    N, d = R.shape
    nd = N * d
    eye, cols = sparse.identity(nd), sparse.kron(np.ones((N, 1)), sparse.eye(d))
    sums = sparse.vstack([sparse.kron(np.ones((1, N)), sparse.eye(d)),  # column sums
                          sparse.kron(sparse.eye(N), np.ones((1, d)))])  # row sums
    A = sparse.bmat([[-cols, -eye, None], [cols, -eye, None],
                     [None, sums, -sparse.block_diag([np.ones((d, 1)), np.ones((N, 1))])]])
    A, b = A.tocsr(), np.concatenate([-R.ravel(), R.ravel(), np.zeros(N + d)])
    bounds = [(None, None)] * d + [(0, None)] * (nd + 2)

    def solve(alpha, beta):
        c = np.zeros(d + nd + 2)
        c[-2:] = alpha, beta
        found = optimize.linprog(c, A_ub=A, b_ub=b, bounds=bounds, method="highs")
        if found.status != 0:
            raise RuntimeError(f"res: the linear program failed ({found.message})")
        B = np.abs(R - found.x[:d])
        return float(B.sum(0).max()), float(B.sum(1).max())

    return solve


def _res_one(R, tol: float = 1e-9, max_solves: int = 500) -> float:
    """min over x of f g (the squared residual) for one centred, unit-Frobenius R.

    Why this search: the attainable (f, g) form a convex set, and f g is concave along each
    edge of its lower-left frontier, so the minimum sits at a vertex. Vertices are found by
    weighted solves between two known ones (weights normal to their chord); a stretch whose
    corner bound a1 b2 cannot beat the best product so far is skipped.
    """
    solve = _residual_lp(R)
    left, right = solve(1.0, 1e-9), solve(1e-9, 1.0)
    best, todo, solves = min(left[0] * left[1], right[0] * right[1]), [(left, right)], 2
    while todo and solves < max_solves:
        (a1, b1), (a2, b2) = todo.pop()
        if a2 - a1 <= tol * a2 or a1 * b2 >= best * (1 - tol):
            continue
        chord = (b1 - b2) * a1 + (a2 - a1) * b1
        a3, b3 = solve(b1 - b2, a2 - a1)
        solves += 1
        if (b1 - b2) * a3 + (a2 - a1) * b3 < chord * (1 - tol):
            best = min(best, a3 * b3)
            todo += [((a1, b1), (a3, b3)), ((a3, b3), (a2, b2))]
    return best


def res(X: torch.Tensor) -> torch.Tensor:
    """Dong et al.'s residual res(X) = min over x of ||X - 1 x^T||_{1,inf}, with
    ||B||_{1,inf} = sqrt(||B||_1 ||B||_inf) (largest column and row sums of |B|).

    Why not from the mean token, like mu: their definition takes the best constant row, which
    in this norm has no closed form (theory.dong_residual measures from the mean, as their
    code does, an upper estimate). Each matrix is one small family of linear programs
    (scipy's HiGHS, exact to its tolerance, about 1e-9 here): for few tokens only (N d up to a
    few thousand). The input is centred and scaled to mu = 1 first, which res allows
    (shifting the tokens by a common vector or scaling them does not change the minimum's
    place), so that collapsed inputs keep the solver's full relative precision.

    Parameters
    ----------
    X : torch.Tensor
        Shape (..., N, d), batched over leading dims.

    Returns
    -------
    torch.Tensor
        Shape (...), float64; 0 where every token is the same.

    Examples
    --------
    >>> round(res(torch.eye(4)).item(), 9)  # identity tokens: mu = sqrt(3), res = 1
    1.0
    >>> round(res(torch.tensor([[0.0, 0.0], [2.0, 1.0]])).item(), 9)  # sqrt(2 * 3 / 2)
    1.732050808
    """
    scale = mu(X)
    R = _f64(X) - _f64(X).mean(-2, keepdim=True)
    flat, scales = R.reshape(-1, *R.shape[-2:]), scale.reshape(-1)
    out = [math.sqrt(_res_one((r / s).numpy())) * s if s > 0 else 0.0
           for r, s in zip(flat, scales.tolist(), strict=True)]
    return torch.tensor(out, dtype=torch.float64).reshape(scale.shape)


METRICS = {
    "mu": mu,
    "relative_mu": relative_mu,
    "frobenius": frobenius,
    "stable_rank": stable_rank,
    "gram_stable_rank": gram_stable_rank,
    "mean_abs_cos": mean_abs_cos,
    "one_minus_min_cos": one_minus_min_cos,
    "mean_one_minus_cos": mean_one_minus_cos,
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
