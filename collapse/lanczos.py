"""Singular values of large matrices: a thick-restart Lanczos solver on A^T A, batched, on any
device, with a compiled fused Gram product for the CPU.

Why a module of its own: the Mind-the-Gap chapters need sigma_1 and sigma_2 of random
attention matrices at T in the tens of thousands, where a dense SVD is out of reach; the
solver is general (any real matrix), the Markov model (`markov`) is one of its users.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from scipy.sparse.linalg import svds

from . import rng
from .checks import ParameterError, check_choice, check_float, check_int, check_matrix
from .runtime import use_threads

__all__ = ["lanczos_singular_values", "top_singular_values"]

_MIXED_MIN_TOL = 1e-11  # below: float32 Ritz vectors (~1e-6 off) no longer carry the values
_MIXED_REACH = 1e-3  # sigma_k / sigma_1 below this: sigma_k^2 drowns in float32 rounding
_RESIDUAL_EVERY = 4  # steps between residual checks, which read all of V and Z


def _svds_top(matrix: np.ndarray, k: int) -> np.ndarray:
    values = svds(matrix, k=k, which="LM", return_singular_vectors=False, tol=0, random_state=0)
    return np.sort(values)[::-1]


def _orthonormal_block(F: torch.Tensor, V: torch.Tensor | None) -> torch.Tensor:
    """Orthonormal columns spanning F with V's span projected out: rounds of Gram-Schmidt, each
    followed by QR, until one keeps more than half of the block's norm (at most 4).

    Why: two rounds are enough unless F lies in V's span up to rounding (A^T A maps the
    basis into itself, as for a rank-one A): then what is left after a round is mostly the
    rounding of the round itself, which lies in V's span again, and each further round
    strips it; two rounds there lost orthogonality step by step until the Ritz values
    exceeded sigma_1 a hundredfold."""
    if V is None or not V.shape[-1]:
        return torch.linalg.qr(F).Q
    for round in range(4):
        before = torch.linalg.vector_norm(F, dim=-2)
        F = F - V @ (V.mT @ F)
        kept = bool((torch.linalg.vector_norm(F, dim=-2) > before / 2).all())
        F = torch.linalg.qr(F).Q
        if round and kept:
            break
    return F


def _gram_product(M: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, Z) = (M V, M^T M V) with M read from memory once (`_gram_rows`, compiled).

    Why: for large T the products run at memory bandwidth, so reading M once instead of
    twice saves up to half the time. The rows are split among torch's threads, one Python
    thread each (the kernel releases the GIL), and their partial Z are added in a fixed
    order. Batched, strided or non-CPU M: the same two products in torch, unfused.
    """
    if not _fused(M):
        W = M @ V
        return W, (W.mT @ M).mT
    Mn = M.detach().numpy()
    Vn = np.ascontiguousarray(V.detach().mT.numpy(), dtype=Mn.dtype)
    Wn = np.empty((len(Vn), M.shape[0]), Mn.dtype)
    parts = max(1, min(torch.get_num_threads(), M.numel() // 2**22))  # >= 4M entries each
    bounds = [M.shape[0] * j // parts for j in range(parts + 1)]
    Zs = np.zeros((parts, *Vn.shape), Mn.dtype)
    spans = [(Mn, Vn, Wn, Zs[j], bounds[j], bounds[j + 1]) for j in range(parts)]
    kernel = _compiled(_gram_rows)
    with ThreadPoolExecutor(parts - 1 or 1) as pool:
        others = [pool.submit(kernel, *span) for span in spans[1:]]
        kernel(*spans[0])
        for other in others:
            other.result()
    return torch.from_numpy(Wn).mT, torch.from_numpy(Zs.sum(axis=0)).mT


@functools.cache
def _compiled(kernel):
    """`kernel` compiled by numba, which releases the GIL, on first use (importing numba takes
    0.4 s; the machine code is cached on disk). "reassoc" lets the sums be vectorised, in an
    order fixed for a given build and machine."""
    import numba

    return numba.njit(nogil=True, fastmath={"reassoc", "contract"}, cache=True)(kernel)


def _gram_rows(M, V, W, Z, lo, hi):
    """W[c, i] = M[i] . V[c] and Z[c] += W[c, i] M[i] for the rows lo <= i < hi, four rows at a
    time: each row comes from memory once, for its dot products, and from cache for Z.

    Why compiled: a library call per block of rows reads each block twice, the second
    time from a cache shared with other processes; fusing per row made a Lanczos product
    at T = 16384 run at the read bandwidth (numpy's BLAS per 2 MiB block: 1.2-1.4x slower).
    """
    b, n = V.shape
    zero = M.dtype.type(0)
    four = lo + (hi - lo) // 4 * 4
    for i in range(lo, four, 4):
        for c in range(b):
            s0 = s1 = s2 = s3 = zero
            for j in range(n):
                v = V[c, j]
                s0 += M[i, j] * v
                s1 += M[i + 1, j] * v
                s2 += M[i + 2, j] * v
                s3 += M[i + 3, j] * v
            W[c, i], W[c, i + 1], W[c, i + 2], W[c, i + 3] = s0, s1, s2, s3
        for c in range(b):
            s0, s1, s2, s3 = W[c, i], W[c, i + 1], W[c, i + 2], W[c, i + 3]
            for j in range(n):
                Z[c, j] += s0 * M[i, j] + s1 * M[i + 1, j] + s2 * M[i + 2, j] + s3 * M[i + 3, j]
    for i in range(four, hi):  # the last rows, one at a time
        for c in range(b):
            s = zero
            for j in range(n):
                s += M[i, j] * V[c, j]
            W[c, i] = s
            for j in range(n):
                Z[c, j] += s * M[i, j]


def _ritz(G: torch.Tensor, V: torch.Tensor, Z: torch.Tensor, k: int, residuals: bool = True):
    """Ritz values sigma (descending), vectors Y, and the top-k relative residuals ||A^T u - sigma
    v|| / sigma_1 (inf when not `residuals`: they read all of V and Z, the values only G)."""
    theta, Y = torch.linalg.eigh((G + G.mT) / 2)
    theta, Y = theta.flip(-1).clamp_min(0), Y.flip(-1)
    sigma, top = theta.sqrt(), min(k, theta.shape[-1])
    if not residuals:
        return sigma, Y, torch.full_like(sigma[..., :top], math.inf)
    R = _combine(Z, Y[..., :top]) - _combine(V, Y[..., :top]) * theta[..., None, :top]
    s1 = sigma[..., :1]
    relative = torch.linalg.vector_norm(R, dim=-2) / (sigma[..., :top] * s1).clamp_min(1e-300)
    return (
        sigma,
        Y,
        torch.where(s1 > 0, relative, torch.zeros_like(relative)),
    )  # zero matrix: nothing to do


def _combine(B: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """B Y for a basis B stored column by column, as (Y^T B^T)^T: torch's CPU product of such
    a B (16384 x 100) by a few columns took 11 ms here, the transposed one 0.6 ms."""
    return (Y.mT @ B.mT).mT


def _settled(history: list[torch.Tensor], tol: float, patience: int) -> torch.Tensor:
    """Whether each of the top-k Ritz values has stopped moving: its remaining change,
    extrapolated geometrically from the changes d0, d1 over the last two windows of `patience`
    steps (Ritz values only grow), is <= tol * sigma_1."""
    if len(history) <= 2 * patience:
        return torch.zeros_like(history[-1], dtype=torch.bool)
    now, mid, old = history[-1], history[-1 - patience], history[-1 - 2 * patience]
    d1, d0 = (now - mid).abs(), (mid - old).abs()
    remaining = torch.where(
        d1 < d0, d1 * d0 / (d0 - d1).clamp_min(1e-300), torch.full_like(d1, math.inf)
    )
    remaining = torch.where(d1 <= 4 * torch.finfo(torch.float64).eps * now[..., :1], d1, remaining)
    return remaining <= tol * now[..., :1]


def _refine(M: torch.Tensor, X: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rayleigh-Ritz of M^T M on span(X) in float64: the top k values and their relative
    residuals.

    Why: float32 products leave the Ritz values up to ~1e-8 sigma_1 off but the Ritz vectors
    only ~1e-6 off, and a Rayleigh quotient's error is quadratic in its vector's (~1e-12):
    one float64 product of the vectors restores what float64 steps would have reached.
    """
    X = _orthonormal_block(X, None)
    W, Z = _gram_product(M, X)
    _, _, relative = _ritz(X.mT @ Z, X, Z, k)
    return torch.linalg.svdvals(W)[..., :k], relative


def _fused(M: torch.Tensor) -> bool:
    """Whether `_gram_product` reads M once per product (2-D, row-major, on the CPU) rather
    than twice."""
    return M.ndim == 2 and M.device.type == "cpu" and M.is_contiguous()


def _krylov(
    M: torch.Tensor,
    P: torch.Tensor,
    k: int,
    tol: float,
    block: int,
    cap: int,
    max_steps: int,
    seed: int,
) -> tuple[torch.Tensor | None, torch.Tensor, dict, bool]:
    """The iteration of `lanczos_singular_values` with products by P, which is M or M in float32
    (then followed by `_refine`): (values, relative residuals, info, done); values is None
    when P is float32 and sigma_k < _MIXED_REACH sigma_1, out of float32's reach."""
    n, batch = M.shape[-1], M.shape[:-2]
    # V, Z, W column by column (each basis vector contiguous): V^T F and V y, the
    # Gram-Schmidt products, ran 4-6x faster here than on row-major bases
    V, Z = M.new_zeros(*batch, cap + block, n).mT, M.new_zeros(*batch, cap + block, n).mT
    W = M.new_zeros(*batch, cap + block, M.shape[-2]).mT
    G = M.new_zeros(*batch, cap + block, cap + block)
    start = torch.randn(
        *batch, n, min(block, n), generator=rng.generator(seed), dtype=torch.float64
    )
    V[..., : start.shape[-1]] = _orthonormal_block(start.to(M.device), None)
    m, b, history, info, done = 0, start.shape[-1], [], {}, False
    small = (
        M.device.type == "cpu"
    )  # small products on one thread; the two large ones on all of them
    for step in range(1, max_steps + 1):
        new = slice(m, m + b)
        W[..., new], Z[..., new] = _gram_product(
            P, V[..., new].to(P.dtype).contiguous()
        )  # a strided column makes the product 2x slower
        m += b
        with use_threads(1) if small else contextlib.nullcontext():
            G[..., :m, new] = V[..., :m].mT @ Z[..., new]
            G[..., new, :m] = G[..., :m, new].mT.clone()
            check = step % _RESIDUAL_EVERY == 0
            sigma, Y, relative = _ritz(G[..., :m, :m], V[..., :m], Z[..., :m], k, check)
            info = {"steps": step, "passes": 2 * step, "dim": m}
            if m >= k:
                if P is not M and bool((sigma[..., k - 1] < _MIXED_REACH * sigma[..., 0]).any()):
                    return None, relative, info, False
                history.append(sigma[..., :k])
                done = m >= n or bool(((relative <= tol) | _settled(history, tol, 5)).all())
            if done:
                break
            b = min(block, n - m)
            F = _orthonormal_block(Z[..., new], V[..., :m])[..., :b]
            if (
                m + b > cap
            ):  # thick restart: keep the leading Ritz vectors; F is orthogonal to all of V
                keep = min(m, max(k + block, (cap + k) // 2))
                Yk = Y[..., :keep]
                V[..., :keep], W[..., :keep], Z[..., :keep] = (
                    _combine(V[..., :m], Yk),
                    _combine(W[..., :m], Yk),
                    _combine(Z[..., :m], Yk),
                )
                G[..., :keep, :keep] = torch.diag_embed(sigma[..., :keep] ** 2)
                m = keep
            V[..., m : m + b] = F
    info["certified"] = m >= n  # the whole space: exact
    if P is M:
        _, _, relative = _ritz(G[..., :m, :m], V[..., :m], Z[..., :m], k)
        return torch.linalg.svdvals(W[..., :m])[..., :k], relative, info, done
    _, Y, _ = _ritz(G[..., :m, :m], V[..., :m], Z[..., :m], k, False)  # a restart may follow
    values, relative = _refine(
        M, _combine(V[..., :m], Y[..., : m if m >= n else min(m, k + 1)]), k
    )
    info["passes"] += 2
    return values, relative, info, done


def lanczos_singular_values(
    A: torch.Tensor,
    k: int,
    *,
    tol: float = 1e-9,
    block: int = 1,
    max_dim: int | None = None,
    max_steps: int | None = None,
    seed: int = 0,
    precision: str = "mixed",
) -> tuple[torch.Tensor, dict]:
    """The k largest singular values of each matrix by thick-restart (block) Lanczos on A^T A,
    batched.

    Why: a full SVD of a T x T matrix costs ~15 s at T = 4096 here and ~15 min at T = 16384,
    while sigma_1 and sigma_2 need only a few hundred matrix-vector products, which run at
    memory bandwidth. The basis V is kept orthonormal (full reorthogonalisation) and
    W = A V, Z = A^T W are stored, so the Ritz values are exact Rayleigh-Ritz values of
    A^T A (from below) and every residual ||A^T u - sigma v|| comes without another pass.
    A value is accepted when its residual is <= tol * sigma_1 (then a singular value of A
    lies within tol * sigma_1: "certified"), or when it has settled (`_settled`): values
    inside a tight cluster, such as the edge of the quarter-circle bulk, converge long
    before their vectors do. Works on any device; the start block comes from `seed`, so the
    result is deterministic (for a given number of torch threads).

    precision "mixed" (the default) runs the Krylov steps on a float32 copy of A, whose
    products read half the bytes, then multiplies the top k + 1 Ritz vectors by A in
    float64 once (`_refine`). float32 rounding leaves those vectors ~1e-6 off and their
    Ritz values up to ~1e-8 sigma_1 off, but the refined values only ~1e-12 sigma_1 off:
    as accurate as with "double" (float64 products throughout), so each value is still
    within tol * sigma_1; the extra vector keeps a pair sigma_k ~ sigma_(k+1) that float32
    rounding mixes inside the span. Where float32 cannot get there (tol < 1e-11, or
    sigma_k < 1e-3 sigma_1: sigma_k^2 below float32's resolution next to sigma_1^2) it runs
    "double". The refined residuals stay near 1e-7, so only "double" certifies below that.
    Returns (values (..., k), info) with info: steps, passes (products with A or A^T,
    `block` columns each, the refinement's included), bytes (of A read by all products),
    precision (the one that gave the values), dim, residual (largest relative residual,
    float64), certified, converged.
    """
    check_matrix("A", A)
    k, block = check_int("k", k, minimum=1), check_int("block", block, minimum=1)
    tol = check_float("tol", tol, positive=True)
    precision = check_choice("precision", precision, ("mixed", "double"))
    M = A.to(torch.float64)
    M = (M.mT if M.shape[-2] < M.shape[-1] else M).contiguous()  # the smaller Gram matrix
    n = M.shape[-1]
    if k > n:
        raise ParameterError(f"k must be at most min(rows, cols) = {n}, got {k}")
    cap = min(n, max_dim or max(128, 4 * (k + block)))
    if cap < min(n, k + block):
        raise ParameterError(f"max_dim must be at least k + block = {k + block}, got {max_dim}")
    max_steps = max_steps or 20 * n // block + 100
    values, read = None, 0  # read: bytes of A, once per product A^T A V where it is fused
    if precision == "mixed" and tol >= _MIXED_MIN_TOL:
        P = M.to(torch.float32, memory_format=torch.contiguous_format)
        values, relative, info, done = _krylov(M, P, k, tol, block, cap, max_steps, seed)
        read = info["steps"] * P.nbytes + (values is not None) * M.nbytes
        del P  # before a fallback allocates its own basis
    if values is None:
        precision = "double"
        values, relative, info, done = _krylov(M, M, k, tol, block, cap, max_steps, seed)
        read += info["steps"] * M.nbytes
    info["bytes"] = read * (1 if _fused(M) else 2)
    info["precision"] = precision
    info["residual"] = float(relative.max())
    info["certified"] = bool(info["certified"] or info["residual"] <= tol)
    info["converged"] = done
    if not done:
        message = (
            f"Lanczos stopped after {max_steps} steps, relative residual "
            f"{info['residual']:.1e} > tol {tol:.1e}"
        )
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return values.to(A.device), info


def top_singular_values(
    A: torch.Tensor, k: int, *, method: str = "auto", tol: float = 1e-9
) -> torch.Tensor:
    """The k largest singular values of each matrix (shape (..., k), descending).

    method: "full" (dense SVD), "iterative" (ARPACK Lanczos via scipy, float64, to
    machine precision, one matrix at a time on the CPU), "lanczos" (thick-restart
    Lanczos in torch, batched and on A's device, each value within tol * sigma_1 of
    the truth; `lanczos_singular_values`), or "auto" ("lanczos" when the matrices are
    large and k small, else "full").
    """
    check_matrix("A", A)
    k = check_int("k", k, minimum=1)
    method = check_choice("method", method, ("auto", "full", "iterative", "lanczos"))
    smallest = min(A.shape[-2:])
    if k > smallest:
        raise ParameterError(f"k must be at most min(rows, cols) = {smallest}, got {k}")
    if method == "auto":
        method = "lanczos" if smallest >= 512 and 4 * k < smallest else "full"
    if method == "full":
        return torch.linalg.svdvals(A)[..., :k]
    if method == "lanczos" and A.device.type != "cpu":
        return lanczos_singular_values(A, k, tol=tol)[0].to(A.dtype)
    # on the CPU one matrix at a time: a batched matrix-vector product is ~10x slower than a loop
    if method == "lanczos":
        flat = A.reshape(-1, *A.shape[-2:])
        values = torch.stack([lanczos_singular_values(m, k, tol=tol)[0] for m in flat])
        return values.reshape(*A.shape[:-2], k).to(A.dtype)
    if k >= smallest:
        raise ParameterError(f"method 'iterative' needs k < min(rows, cols) = {smallest}, got {k}")
    flat = A.detach().to("cpu", torch.float64).reshape(-1, *A.shape[-2:]).numpy()
    values = np.stack([_svds_top(m, k) for m in flat])
    return torch.from_numpy(values).reshape(*A.shape[:-2], k).to(A.device)
