"""The collapse bounds of Wu et al. (Theorem 1, Theorem 2, Corollary 1) and their epsilon, and
Dong et al.'s doubly exponential bound for comparison.

Each bound has the form mu(X_t) <= C * q^(t / k): we expose the per-layer rate
log(q) / k (the slope of log mu against t that the theorem guarantees) and the bound
itself. epsilon is the smallest attention weight on any edge of the mask graph, over
all layers; `epsilon` estimates it from the attention matrices a run actually used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch

from . import attention as _attention
from . import masks as _masks
from .checks import ParameterError, check_float, check_int

__all__ = [
    "epsilon",
    "theorem1_rate",
    "theorem1_bound",
    "theorem1_slope",
    "gaussian_tokens",
    "theorem2_rate",
    "corollary1_rate",
    "run_epsilon",
    "mask_table",
    "layernorm_rate",
    "layernorm_rates",
    "result_counts",
    "token_sets",
    "min_cosine",
    "orthogonality_defect",
    "composite_norm",
    "dong_residual",
    "dong_beta",
    "dong_log_bound",
]


def epsilon(A: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Smallest entry of each attention matrix on the allowed edges (min over the last two
    dims)."""
    if mask is not None:
        A = A.masked_fill(~mask, math.inf)
    return A.amin(dim=(-2, -1))


def _check(eps, r) -> tuple[float, int]:
    eps = check_float("eps", eps, positive=True)
    if eps > 1:
        raise ParameterError(f"eps must be in (0, 1] (an attention weight), got {eps}")
    if isinstance(r, float) and math.isinf(r):
        raise ParameterError(
            "r must be a finite int >= 1: the bounds need a quasi-strongly connected mask"
        )
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


def theorem1_slope(eps: float, r) -> float:
    """Theorem 1's slope for a run of radius `r` whatever the run gave: NaN without a center
    (r infinite: the theorem says nothing), 0 when the smallest weight underflowed to 0.

    Why: a table over many masks needs a value in every row, not an error for the masks
    the theorem does not cover.

    Examples
    --------
    >>> theorem1_slope(0.5, 1), theorem1_slope(0.5, math.inf), theorem1_slope(0.0, 3)
    (-0.6931471805599453, nan, 0.0)
    """
    if not math.isfinite(r):
        return math.nan
    return theorem1_rate(float(eps), int(r)) if eps > 0 else 0.0


def gaussian_tokens(seeds, n: int, d: int, *, unit: bool = False) -> torch.Tensor:
    """The toy network's inputs, (seed, n, d) in float64: rows N(0, I/d), one generator per
    seed, so that a smaller profile reuses the first seeds' inputs; unit=True scales each
    row of N(0, I) to norm 1 instead.

    Examples
    --------
    >>> X = gaussian_tokens([0, 1], 3, 4)
    >>> X.shape, bool(torch.equal(X[1], gaussian_tokens([1], 3, 4)[0]))
    (torch.Size([2, 3, 4]), True)
    """
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    X = torch.stack([torch.randn(n, d, generator=g, dtype=torch.float64) for g in generators])
    return _attention.scale_layernorm(X) if unit else X / math.sqrt(d)


def theorem2_rate(eps: float, r: int, N: int) -> float:
    """log(1 - N eps^(2r)) / (2r): Theorem 2 (scale-only LN, orthogonal W_V, strongly connected, N
    eps < 1)."""
    eps, r = _check(eps, r)
    N = check_int("N", N, minimum=1)
    if N * eps >= 1:
        raise ParameterError(f"Theorem 2 needs N * eps < 1, got N={N}, eps={eps}")
    return math.log1p(-N * eps ** (2 * r)) / (2 * r)


def corollary1_rate(eps: float, r: int, n_centers: int = 1) -> float:
    """log(1 - n eps^(2r)) / (2r): Corollary 1 (quasi-strongly connected, non-negative initial
    cosines)."""
    eps, r = _check(eps, r)
    n_centers = check_int("n_centers", n_centers, minimum=1)
    q = n_centers * eps ** (2 * r)
    if q >= 1:
        raise ParameterError(f"Corollary 1 needs n_centers * eps^(2r) < 1, got {q}")
    return math.log1p(-q) / (2 * r)


def run_epsilon(eps_history) -> np.ndarray:
    """The theorems' epsilon for each run: the smallest edge weight over all layers t >= 1.

    Why: the bounds use one epsilon for the whole trajectory, while `san.simulate(...,
    record_epsilon=True)` records one per layer (NaN at t = 0). eps_history has shape
    (L+1, *batch); the result has shape batch.
    """
    eps = (
        eps_history.numpy()
        if isinstance(eps_history, torch.Tensor)
        else np.asarray(eps_history, dtype=float)
    )
    if eps.ndim < 1 or eps.shape[0] < 2:
        raise ParameterError(
            f"eps_history must hold layers 0..L with L >= 1 along dim 0, got shape {eps.shape}"
        )
    return eps[1:].min(axis=0)


def mask_table(named_masks: Mapping[str, torch.Tensor]) -> pd.DataFrame:
    """Radius, diameter, number of centers and connectivity of each named mask, one row each.

    Why: the hypotheses (quasi-strong or strong connectivity) and the constant r of
    Theorems 1-2 are graph properties; notebooks show them next to the collapse curves.
    """
    if not named_masks:
        raise ParameterError("named_masks must name at least one mask")
    rows = {
        name: {
            "radius": _masks.radius(mask),
            "diameter": _masks.diameter(mask),
            "centers": len(_masks.centers(mask)),
            "quasi_strongly_connected": _masks.is_quasi_strongly_connected(mask),
            "strongly_connected": _masks.is_strongly_connected(mask),
        }
        for name, mask in named_masks.items()
    }
    return pd.DataFrame.from_dict(rows, orient="index")


def layernorm_rate(
    mask: torch.Tensor, eps: float, *, d: int, nonnegative_cosines: bool, full_rank: bool = True
) -> tuple[float, str]:
    """The guaranteed slope of log mu under scale-only post-LN and orthogonal W_V, and its source.

    Why: Theorem 2 and Corollary 1 have different hypotheses; this picks the one that
    holds for this run (Theorem 2 first: strongly connected, N <= d, full-rank X0,
    N eps < 1; else Corollary 1: a center, all initial cosines >= 0, n eps^(2r) < 1)
    and returns (rate, "Theorem 2" | "Corollary 1"), or (nan, the hypotheses that fail).
    eps = 0 (attention weights underflowed) satisfies the hypotheses trivially and
    guarantees nothing: the rate is then 0.
    """
    eps = check_float("eps", eps, minimum=0.0)
    if eps > 1:
        raise ParameterError(f"eps must be in [0, 1] (an attention weight), got {eps}")
    d = check_int("d", d, minimum=1)
    N, r = mask.shape[-1], _masks.radius(mask)
    failed = []
    if not _masks.is_strongly_connected(mask):
        failed.append("not strongly connected")
    if d < N:
        failed.append(f"N={N} > d={d}")
    if not full_rank:
        failed.append("X0 not of full rank")
    if N * eps >= 1:
        failed.append(f"N eps = {N * eps:.3g} >= 1")
    if not failed:
        return (theorem2_rate(eps, r, N) if eps > 0 else 0.0), "Theorem 2"
    n_centers = len(_masks.centers(mask))
    cor1_failed = []
    if n_centers == 0:
        cor1_failed.append("no center")
    if not nonnegative_cosines:
        cor1_failed.append("some initial cosine < 0")
    if n_centers and n_centers * eps ** (2 * r) >= 1:
        cor1_failed.append("n eps^(2r) >= 1")
    if not cor1_failed:
        return (corollary1_rate(eps, r, n_centers) if eps > 0 else 0.0), "Corollary 1"
    return math.nan, "none: Thm 2 (" + ", ".join(failed) + "); Cor 1 (" + ", ".join(
        cor1_failed
    ) + ")"


def layernorm_rates(mask_list, eps, *, d: int, nonnegative_cosines, full_rank):
    """`layernorm_rate` of every run of a batch: which result covers each, and its slope.

    Parameters
    ----------
    mask_list : sequence of Tensor
        The masks, (n, n) each.
    eps : ndarray
        (seed, token set, mask), each run's smallest edge weight.
    d : int
        The token width.
    nonnegative_cosines, full_rank : ndarray of bool
        (seed, token set): the hypotheses on the inputs.

    Returns
    -------
    slopes : ndarray
        (seed, token set, mask), the guaranteed slope, NaN where no result applies.
    sources : ndarray of str
        (seed, token set, mask), "Theorem 2", "Corollary 1" or the hypotheses that fail.
    """
    runs = [
        [
            [
                layernorm_rate(
                    mask, float(eps[s, i, k]), d=d,
                    nonnegative_cosines=bool(nonnegative_cosines[s, i]),
                    full_rank=bool(full_rank[s, i]),
                )
                for k, mask in enumerate(mask_list)
            ]
            for i in range(eps.shape[1])
        ]
        for s in range(eps.shape[0])
    ]
    slopes = np.array([[[run[0] for run in row] for row in seed] for seed in runs])
    return slopes, np.array([[[run[1] for run in row] for row in seed] for seed in runs])


def result_counts(sources) -> str:
    """How many runs each result covers, 'Theorem 2 (15), none (5)', from `layernorm_rates`'
    sources of one case (most runs first)."""
    named = pd.Series(list(sources)).map(
        lambda x: x if x.startswith(("Theorem", "Corollary")) else "none"
    )
    return ", ".join(f"{name} ({n})" for name, n in named.value_counts().items())


def token_sets(seeds, n: int, d: int) -> torch.Tensor:
    """Chapter 04's two token sets per seed, (seed, 2, n, d): the rows of |G| and of G for
    one Gaussian matrix G per seed, scaled to unit norm; the first set's cosines are all
    >= 0 (Corollary 1's condition), the second's of both signs."""
    G = torch.stack([torch.randn(n, d, generator=torch.Generator().manual_seed(s),
                                 dtype=torch.float64) for s in seeds])
    return _attention.scale_layernorm(torch.stack([G.abs(), G], dim=1))


def min_cosine(X: torch.Tensor) -> torch.Tensor:
    """Smallest cosine between two distinct tokens of each sequence of unit rows (..., n, d):
    whether Corollary 1's non-negative cosines hold."""
    cos = X @ X.transpose(-1, -2)
    return (cos + 2 * torch.eye(X.shape[-2], dtype=X.dtype)).amin(dim=(-2, -1))


def orthogonality_defect(W: torch.Tensor) -> torch.Tensor:
    """How far W is from a multiple of a matrix with orthonormal columns, the value matrices
    of Theorem 2: ||W^T W / c - I||_F / sqrt(n) with c = ||W||_F^2 / n, for W (..., m, n).

    It is the coefficient of variation of W's squared singular values, 0 exactly for a
    scaled orthogonal (or, m > n, isometric) W and independent of W's scale, which
    LayerNorm divides out. For i.i.d. entries and m >= n both large the Marchenko-Pastur
    law gives sqrt(n / m): 1 for a square matrix, whatever its size.

    Parameters
    ----------
    W : torch.Tensor
        Shape (..., m, n), batched over leading dims; not zero.

    Returns
    -------
    torch.Tensor
        Shape (...), float64.

    Examples
    --------
    >>> W = torch.diag(torch.tensor([1.0, 3.0**0.5], dtype=torch.float64))
    >>> round(orthogonality_defect(W).item(), 12)  # squared singular values 1 and 3
    0.5
    >>> orthogonality_defect(2 * torch.eye(3)).item()
    0.0
    """
    W = W.to(torch.float64)
    n = W.shape[-1]
    gram = W.transpose(-1, -2) @ W
    scale = gram.diagonal(dim1=-2, dim2=-1).sum(-1) / n  # mean squared singular value
    eye = torch.eye(n, dtype=torch.float64, device=W.device)
    return torch.linalg.matrix_norm(gram / scale[..., None, None] - eye) / math.sqrt(n)


def composite_norm(X: torch.Tensor) -> torch.Tensor:
    """sqrt(||X||_1 ||X||_inf) over the last two dims: Dong et al.'s l_{1,inf} norm.

    ||X||_1 is the largest absolute column sum, ||X||_inf the largest absolute row sum.
    """
    X = X.to(torch.float64)
    col = X.abs().sum(-2).amax(-1)
    row = X.abs().sum(-1).amax(-1)
    return torch.sqrt(col * row)


def dong_residual(X: torch.Tensor) -> torch.Tensor:
    """||X - 1 mean(X)||_{1,inf}: the residual of Dong et al. measured from the mean token.

    Why: Dong et al. take the residual from the best rank-one x (argmin over x), which has
    no closed form in this norm; the mean token gives an upper estimate of it, the same
    centring as mu.
    """
    X = X.to(torch.float64)
    return composite_norm(X - X.mean(-2, keepdim=True))


def dong_beta(W_Q: torch.Tensor, W_K: torch.Tensor, W_V: torch.Tensor) -> torch.Tensor:
    """||W_Q W_K^T||_1 ||W_V||_{1,inf}: the per-layer constant that beta bounds in Dong et al.'s
    Theorem 2.2 (batched over leading dims)."""
    W_QK = W_Q.to(torch.float64) @ W_K.to(torch.float64).transpose(-1, -2)
    return W_QK.abs().sum(-2).amax(-1) * composite_norm(W_V)


def dong_log_bound(t, log_res0: float, beta: float, *, gamma: float = 1.0, d_qk: float = 1.0):
    """log of Dong et al.'s bound (Theorem 2.2) after t layers of single-head pure attention:

        res(X_t) <= (4 gamma beta / sqrt(d_qk))^((3^t - 1) / 2) res(X_0)^(3^t),

    res in the l_{1,inf} norm, beta >= ||W_QK||_1 ||W_V||_{1,inf} in every layer and gamma
    a term that depends on the attention entries (Dong et al. leave it unspecified; we take
    gamma = 1 by default). Why a log: 3^t overflows a float beyond t ~ 640; the result is a
    float array (+-inf where it overflows). The bound decreases in t iff
    res(X_0) sqrt(4 gamma beta / sqrt(d_qk)) < 1.
    """
    beta = check_float("beta", beta, positive=True)
    gamma = check_float("gamma", gamma, positive=True)
    d_qk = check_float("d_qk", d_qk, positive=True)
    log_c = math.log(4 * gamma * beta / math.sqrt(d_qk))
    t = np.asarray(t, dtype=float)
    if (t < 0).any():
        raise ParameterError("t must be >= 0 (layers)")
    with np.errstate(over="ignore", invalid="ignore"):
        power = np.power(3.0, t)
        # (3^t - 1)/2 log c + 3^t log r0, written so that 3^t = inf gives +-inf, not inf - inf
        out = power * (log_c / 2 + float(log_res0)) - log_c / 2
    return np.where(t == 0, float(log_res0), out)
