"""LayerNorm can prevent collapse: the constructions of Wu et al. Section 4.3.

Causal mask, W_Q = W_K = 0 (so token i averages tokens 1..i uniformly), scale-only
LayerNorm, and W_V = I + w * (ones on the superdiagonal) with w > 1.

In 2-D (Section 4.3.1) token 1 converges to (0, +-1). With token 1 at (0, 1), token 2
has two fixed points P+ = (-1/w, s) (unstable, the paper's A) and P- = (-1/w, -s)
(attracting, its B), s = sqrt(1 - 1/w^2); initial angles in (theta+, 270 deg), with
theta+ = 180 deg - arccos(1/w), converge to P-, every other angle collapses onto token 1.
`equilibrium` builds the N-token equilibria of Theorem 3 (every rank 1..N);
`stability_modes` and `perturb_and_iterate` probe which directions around them return.

The iterations here move tiny tensors (a few tokens of width <= 8) thousands of times,
and the stability analysis factorises matrices of a few dozen rows: both run
single-threaded, because handing such small products to several BLAS/LAPACK threads
costs far more than the work itself (measured 5-50x slower on a loaded 2-core machine).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from . import metrics as _metrics
from .attention import scale_layernorm
from .checks import ParameterError, check_float, check_int, check_matrix
from .rng import generator as _generator
from .runtime import use_threads

__all__ = [
    "value_matrix",
    "step",
    "iterate",
    "trajectory",
    "final_state",
    "no_layernorm_bound",
    "fixed_points",
    "basin",
    "basin_fraction",
    "clear_starts",
    "angle",
    "unit",
    "arc_numbers",
    "torus_survivors",
    "angle_grid_states",
    "angle_pair_states",
    "random_starts",
    "limit_labels",
    "LIMIT_NAMES",
    "equilibrium",
    "stable_rank_bound",
    "tangent_basis",
    "stability_modes",
    "perturb_and_iterate",
    "sign_patterns",
    "residual",
    "conditioning",
    "equilibria_summary",
    "rank_family",
    "stability_probe",
    "power_norms",
    "random_orthogonal",
    "rotation_gap",
]


def _check_w(w) -> float:
    w = check_float("w", w, positive=True)
    if w <= 1:
        raise ParameterError(f"w must be a number > 1 (the construction needs it), got {w}")
    return w


def value_matrix(d: int, w: float, normalized: bool = False) -> torch.Tensor:
    """W_V = I + w * superdiagonal of ones (d x d, float64).

    normalized=True divides by the spectral norm: W_V / ||W_V||_2 has bounded products
    (assumption A3 of Theorem 3), and scale-only LN makes the dynamics identical.
    """
    d = check_int("d", d, minimum=1)
    W = torch.eye(d, dtype=torch.float64) + _check_w(w) * torch.diag(
        torch.ones(d - 1, dtype=torch.float64), 1
    )
    return W / torch.linalg.matrix_norm(W, ord=2) if normalized else W


def _layer(
    X: torch.Tensor, W_V: torch.Tensor, counts: torch.Tensor, layernorm: bool
) -> torch.Tensor:
    # A X with A the causal average is a cumulative mean over tokens: no N x N product needed.
    X = (X.cumsum(-2) / counts) @ W_V
    return scale_layernorm(X) if layernorm else X


def _counts(N: int) -> torch.Tensor:
    return torch.arange(1, N + 1, dtype=torch.float64)[:, None]


def step(X: torch.Tensor, w: float, layernorm: bool = True) -> torch.Tensor:
    """One layer X -> LN(A X W_V) (or A X W_V without LN), batched over leading dims."""
    check_matrix("X", X)
    return _layer(X.double(), value_matrix(X.shape[-1], w), _counts(X.shape[-2]), layernorm)


def iterate(
    X0: torch.Tensor,
    W_V: torch.Tensor,
    steps: int,
    layernorm: bool = True,
    keep_path: bool = False,
) -> torch.Tensor:
    """X_steps (or the path X_0..X_steps) of X -> LN(A X W_V) for any fixed value matrix.

    Why: one loop for every W_V the notebooks need (the paper's, its normalised A3
    version, a rotated Z^T W Z, or a stack of several w at once: W_V (..., d, d)
    broadcasts against X0's batch dims). Single-threaded (see the module docstring).
    """
    check_matrix("X0", X0)
    check_matrix("W_V", W_V, square=True)
    steps = check_int("steps", steps, minimum=0)
    if W_V.shape[-1] != X0.shape[-1]:
        raise ParameterError(
            f"W_V must be {X0.shape[-1]} x {X0.shape[-1]} to match X0's width, got "
            f"{tuple(W_V.shape)}"
        )
    X, W_V, counts = X0.double(), W_V.double(), _counts(X0.shape[-2])
    path = [X] if keep_path else None
    with use_threads(1), torch.no_grad():
        for _ in range(steps):
            X = _layer(X, W_V, counts, layernorm)
            if keep_path:
                path.append(X)
    return torch.stack(torch.broadcast_tensors(*path)) if keep_path else X


def trajectory(X0: torch.Tensor, w: float, steps: int, layernorm: bool = True) -> torch.Tensor:
    """All states X_0..X_steps, shape (steps + 1, *X0.shape)."""
    check_matrix("X0", X0)
    return iterate(X0, value_matrix(X0.shape[-1], w), steps, layernorm, keep_path=True)


def final_state(X0: torch.Tensor, w: float, steps: int, layernorm: bool = True) -> torch.Tensor:
    """X_steps without keeping the path (for long runs over many initial conditions)."""
    check_matrix("X0", X0)
    return iterate(X0, value_matrix(X0.shape[-1], w), steps, layernorm)


def no_layernorm_bound(t, w: float):
    """2^-t (1 + t w): without LN, mu(X_t) <= this * mu(X_0) in 2-D (Wu et al., Section 4.3.1).

    Why: token 2 minus token 1 is halved by the causal average and then multiplied by
    W_V, whose t-th power [[1, t w], [0, 1]] has spectral norm <= 1 + t w.
    """
    t = torch.as_tensor(t, dtype=torch.float64)
    return 2.0**-t * (1 + t * _check_w(w))


def fixed_points(w: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(P+, P-) of token 2 when token 1 sits at (0, 1): (-1/w, +-sqrt(1 - 1/w^2))."""
    w = _check_w(w)
    s = math.sqrt(1 - 1 / w**2)
    return torch.tensor([-1 / w, s], dtype=torch.float64), torch.tensor(
        [-1 / w, -s], dtype=torch.float64
    )


def basin(w: float) -> tuple[float, float]:
    """Open arc (degrees) of token 2's initial angles that converge to P- with token 1 at (0,
    1)."""
    return 180.0 - math.degrees(math.acos(1 / _check_w(w))), 270.0


def basin_fraction(w: float) -> float:
    """The share of the circle that the basin of P- covers, (90 + arccos(1/w) deg) / 360.

    Examples
    --------
    >>> round(basin_fraction(2.0), 4)
    0.4167
    """
    return (90 + math.degrees(math.acos(1 / _check_w(w)))) / 360


def clear_starts(theta_deg, w: float, margin: float = 1.0) -> np.ndarray:
    """Which initial angles of token 2 lie more than `margin` degrees from both ends of the
    basin of P- (theta+ and 270 deg): the starts whose fate rounding cannot decide.

    Examples
    --------
    >>> clear_starts([119.5, 121.5, 269.5, 300.0], 2.0).tolist()  # theta+ = 120 deg at w = 2
    [False, True, False, True]
    """
    theta = np.asarray(theta_deg, dtype=float)
    margin = check_float("margin", margin, positive=True)
    return np.all([np.abs(theta - end) > margin for end in basin(w)], axis=0)


def angle(v: torch.Tensor) -> torch.Tensor:
    """Angle of 2-D vectors (..., 2) in degrees, in [0, 360)."""
    return torch.rad2deg(torch.atan2(v[..., 1], v[..., 0])) % 360


def unit(deg):
    """The point(s) (cos, sin) of the unit circle at angle(s) `deg`, in degrees (numpy)."""
    return np.cos(np.radians(deg)), np.sin(np.radians(deg))


def arc_numbers(theta, labels, mu_end, mu_no_ln, w: float) -> dict:
    """Every number chapter 05's verdicts read for one w, from its grid of token 2's starts
    (token 1 pinned at (0, 1)).

    Parameters
    ----------
    theta : ndarray
        Token 2's initial angles, degrees, (angle,).
    labels : Tensor
        `limit_labels` of the long runs with LayerNorm, (angle,).
    mu_end : Tensor
        mu at the end of those runs, (angle,).
    mu_no_ln : Tensor
        mu of the runs without LayerNorm, (layer, angle), layer 0 first.
    w : float

    Returns
    -------
    dict
        The fixed points' residual after one layer; whether the arc is exact on the
        angles more than 1 deg from its ends, how many such starts lie on and off it, and
        how many of those end elsewhere; the fraction reaching P- and its prediction; mu at
        P-+ and its largest distance from sqrt(1 +- s) (for P-, also over the runs that
        reached it); without LayerNorm, the largest final mu and how many (layer, start)
        pairs exceed the bound beyond float64 rounding.
    """
    lo, hi = basin(w)
    clear = clear_starts(theta, w)
    inside = (theta > lo) & (theta < hi)
    lab, s = labels.numpy(), math.sqrt(1 - 1 / w**2)
    pole = torch.tensor([0.0, 1.0], dtype=torch.float64)
    fixed = [torch.stack([pole, p]) for p in fixed_points(w)]  # [P+, P-] beside token 1
    mu_plus, mu_minus = (float(_metrics.mu(X)) for X in fixed)
    bound = no_layernorm_bound(torch.arange(len(mu_no_ln)), w)[:, None] * mu_no_ln[0]
    return {
        "fixed-point residual": max(float((step(X, w) - X).abs().max()) for X in fixed),
        "arc exact": bool(
            ((lab == 1) == inside)[clear].all() and (lab[clear & ~inside] == 0).all()
        ),
        "arc starts": int((clear & inside).sum()),
        "arc misses": int((clear & inside & (lab != 1)).sum()),
        "olive starts": int((clear & ~inside).sum()),
        "olive survivors": int((clear & ~inside & (lab != 0)).sum()),
        "fraction to P-": float((lab == 1).mean()),
        "predicted": basin_fraction(w),
        "μ(P-)": mu_minus,
        "μ(P+)": mu_plus,
        "μ(P-) error": max(
            abs(mu_minus - math.sqrt(1 + s)),
            float((mu_end[labels == 1] - math.sqrt(1 + s)).abs().max()),
        ),
        "μ(P+) error": abs(mu_plus - math.sqrt(1 - s)),
        "no LN: max μ(X_40)": float(mu_no_ln[-1].max()),
        "no LN: bound violations": int((mu_no_ln > bound * (1 + 1e-12) + 1e-15).sum()),
    }


def torus_survivors(theta_deg, w: float, steps: int) -> np.ndarray:
    """Which pairs of initial angles (token 1, token 2) never collapse, with token 1 free:
    1 where mu > 0.1 after `steps` layers, 0 where it is below, NaN for the antipodal pairs
    (their average is 0: the next layer is undefined). Shape (theta1, theta2).

    Why: a surviving run settles at mu = sqrt(1 + s) > 1, a collapsing one halves mu at
    every layer once token 2 is near token 1, so any threshold in between separates them.
    """
    theta = np.asarray(theta_deg, dtype=float)
    antipodal = np.isclose((theta[None, :] - theta[:, None]) % 360, 180)
    end = final_state(angle_pair_states(theta, theta), w, steps)  # (theta1, theta2, 2, 2)
    return np.where(antipodal, np.nan, (_metrics.mu(end) > 0.1).numpy())


def angle_grid_states(theta_deg, token1=(0.0, 1.0)) -> torch.Tensor:
    """Initial states (len(theta), 2, 2): token 1 fixed, token 2 on the unit circle at each
    angle."""
    theta = torch.as_tensor(theta_deg, dtype=torch.float64).reshape(-1)
    token2 = torch.stack(
        [torch.cos(torch.deg2rad(theta)), torch.sin(torch.deg2rad(theta))], dim=-1
    )
    token1 = torch.as_tensor(token1, dtype=torch.float64).expand_as(token2)
    return torch.stack([token1, token2], dim=-2)


def angle_pair_states(theta1_deg, theta2_deg) -> torch.Tensor:
    """Initial states (len(theta1), len(theta2), 2, 2): both tokens on the unit circle, every pair.

    Why: the counterexample assumes token 1 has already converged; this grid (a torus
    of initial angles) shows what happens when it has not.
    """
    t1 = torch.deg2rad(torch.as_tensor(theta1_deg, dtype=torch.float64).reshape(-1))
    t2 = torch.deg2rad(torch.as_tensor(theta2_deg, dtype=torch.float64).reshape(-1))
    T1, T2 = torch.meshgrid(t1, t2, indexing="ij")
    token1 = torch.stack([torch.cos(T1), torch.sin(T1)], dim=-1)
    token2 = torch.stack([torch.cos(T2), torch.sin(T2)], dim=-1)
    return torch.stack([token1, token2], dim=-2)


def random_starts(
    n: int, N: int, d: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """n inputs (n, N, d) whose rows are uniform on the unit sphere (normalised Gaussians).

    Why: Theorem 3's second part is about a set of inputs of positive measure; the
    uniform law on the product of spheres (the state space under LN) measures it.
    """
    n, N, d = (check_int(k, v, minimum=1) for k, v in (("n", n), ("N", N), ("d", d)))
    return scale_layernorm(torch.randn(n, N, d, generator=generator, dtype=torch.float64))


LIMIT_NAMES = {
    0: "collapsed onto token 1",
    1: "P- (not collapsed)",
    2: "P+ (unstable)",
    -1: "undefined / not converged",
}


def limit_labels(X: torch.Tensor, w: float, atol: float = 1e-6) -> torch.Tensor:
    """Label 2-D states (..., 2, 2) by their limit: codes of LIMIT_NAMES.

    Token 1 must sit (within atol) at a pole (0, s), s = +-1; token 2 is then compared
    with s * P-, s * P+ and token 1 itself (the dynamics is odd, X -> -X, so the pole
    (0, -1) carries the mirrored fixed points). Anything else, NaN included, is -1.
    """
    check_matrix("X", X)
    atol = check_float("atol", atol, positive=True)
    plus, minus = fixed_points(w)
    X = X.double()
    sign = torch.sign(X[..., 0, 1])[..., None]
    at_pole = (X[..., 0, :] - sign * torch.tensor([0.0, 1.0], dtype=torch.float64)).norm(
        dim=-1
    ) < atol
    labels = torch.full(X.shape[:-2], -1, dtype=torch.int64)
    for code, target in ((0, X[..., 0, :]), (1, sign * minus), (2, sign * plus)):
        labels[at_pole & ((X[..., 1, :] - target).norm(dim=-1) < atol)] = code
    return labels


def equilibrium(
    N: int, w: float, signs: Sequence[int] | None = None, rank: int | None = None
) -> torch.Tensor:
    """An equilibrium X* (N x N) of the N-token dynamics with LN (Theorem 3's construction).

    Token 1 is e_N; each later token i solves X_i[k] = -v[k+1] / w for k < N and
    X_i[N] = sign * sqrt(1 - sum_k X_i[k]^2), with v = (sum_{j<i} X_j) W_V. `signs`
    (one +-1 per token 2..N, default all -1) picks the branch; `rank` = k repeats e_N
    for the first N - k + 1 tokens so that X* has rank exactly k (needs w >= N).
    """
    N = check_int("N", N, minimum=1)
    W_V = value_matrix(N, w)
    rank = N if rank is None else check_int("rank", rank, minimum=1)
    if rank > N:
        raise ParameterError(f"rank must be an int in [1, N={N}], got {rank}")
    signs = [-1] * (N - 1) if signs is None else list(signs)
    if len(signs) != N - 1 or any(s not in (-1, 1) for s in signs):
        raise ParameterError(f"signs must be {N - 1} values, each +1 or -1, got {signs}")
    X = torch.zeros(N, N, dtype=torch.float64)
    n_repeat = N - rank + 1
    X[:n_repeat, -1] = 1.0
    for i in range(n_repeat, N):
        v = X[:i].sum(0) @ W_V
        X[i, :-1] = -v[1:] / w
        rest = 1 - float((X[i, :-1] ** 2).sum())
        if rest < 0:
            raise ParameterError(
                f"w={w} is too small for this construction at N={N}, rank={rank} (try w >= N)"
            )
        X[i, -1] = signs[i - 1] * math.sqrt(rest)
    return X


def stable_rank_bound(N: int, w: float) -> float:
    """N / (N - (N - 1) / w^2): Wu et al.'s bound (App. F.2) on sr(X*) for Theorem 3's equilibria.

    Why: it says the equilibria, though of full rank, are nearly rank one for large w.
    """
    N = check_int("N", N, minimum=1)
    w = _check_w(w)
    return N / (N - (N - 1) / w**2)


def tangent_basis(X: torch.Tensor) -> torch.Tensor:
    """(N, d, d - 1): per token an orthonormal basis of the plane orthogonal to it.

    Why: under LN every token lives on the unit sphere, so perturbations and the
    linearised map only make sense in these tangent planes.
    """
    check_matrix("X", X)
    N, d = X.shape
    frames = torch.cat(
        [X.double()[:, :, None], torch.eye(d, dtype=torch.float64).expand(N, d, d)], dim=-1
    )
    Q, _ = torch.linalg.qr(frames)
    return Q[:, :, 1:d]


def stability_modes(X: torch.Tensor, w: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (complex, sorted by modulus) of the LN step linearised at X, and real unit
    directions.

    The Jacobian of X -> LN(A X W_V) is taken by autograd and restricted to the tangent
    planes of the tokens (its range lies there at an equilibrium). |lambda| < 1: the
    direction returns; > 1: it leaves; = 1: the linearisation cannot tell, the
    nonlinear dynamics decides. Directions (M, N, d) are the real parts of the
    eigenvectors (for a complex pair: a vector of the invariant plane), unit Frobenius norm.
    Why: Theorem 3 says its equilibria are stable only in some directions; this names them.
    """
    check_matrix("X", X)
    N, d = X.shape
    X = X.double()
    with use_threads(1):  # small dense LAPACK calls: threads only contend (module docstring)
        J = torch.autograd.functional.jacobian(
            lambda x: step(x.reshape(N, d), w).reshape(-1), X.reshape(-1)
        )
        B = torch.block_diag(*tangent_basis(X))  # (N d, N (d - 1))
        values, vectors = torch.linalg.eig(B.T @ J @ B)
    order = torch.argsort(values.abs())
    directions = (B @ vectors[:, order].real).T.reshape(-1, N, d)
    return values[order], directions / directions.flatten(1).norm(dim=1).reshape(-1, 1, 1)


def perturb_and_iterate(
    X: torch.Tensor, w: float, directions: torch.Tensor, eps: float, steps: int
) -> torch.Tensor:
    """||X_t - X||_F for t = 0..steps, starting from LN(X + eps * direction), one column per
    direction.

    Why: the linearisation says nothing along eigenvalues of modulus 1; iterating the
    full nonlinear map from small perturbations shows which ones come back.
    """
    check_matrix("X", X)
    eps = check_float("eps", eps, positive=True)
    if directions.shape[-2:] != X.shape:
        raise ParameterError(
            f"directions must have shape (M, {X.shape[0]}, {X.shape[1]}), got "
            f"{tuple(directions.shape)}"
        )
    starts = scale_layernorm(X.double() + eps * directions.double())
    path = iterate(starts, value_matrix(X.shape[-1], w), steps, keep_path=True)
    return (path - X.double()).flatten(-2).norm(dim=-1)


def sign_patterns(N: int) -> list[list[int]]:
    """All 2^(N-1) sign choices of tokens 2..N in Theorem 3's construction, the paper's
    branch (all -1) first: every equilibrium `equilibrium` can build at full rank.

    Examples
    --------
    >>> sign_patterns(3)
    [[-1, -1], [-1, 1], [1, -1], [1, 1]]
    """
    N = check_int("N", N, minimum=1)
    return [list(s) for s in itertools.product([-1, 1], repeat=N - 1)]


def residual(X: torch.Tensor, w: float) -> float:
    """Largest entry of |step(X) - X|: how far X is from being an equilibrium.

    Examples
    --------
    >>> residual(equilibrium(3, 2.0), 2.0) < 1e-15
    True
    """
    return float((step(X, w) - X).abs().max())


def conditioning(X: torch.Tensor) -> torch.Tensor:
    """sigma_min / sigma_1 of each matrix (..., n, d): how close to rank one a state of full
    rank is, which the rank alone does not say. Shape (...).

    Examples
    --------
    >>> float(conditioning(torch.diag(torch.tensor([2.0, 0.5], dtype=torch.float64))))
    0.25
    """
    s = torch.linalg.svdvals(X)
    return s[..., -1] / s[..., 0]


def equilibria_summary(N: int, w: float, tol: float = 1e-9) -> dict:
    """One row of chapter 06's table: every number its verdicts read on the 2^(N-1)
    equilibria of size N at shear w.

    Parameters
    ----------
    N : int
        Tokens and width, N = d.
    w : float
        The shear of W_V = I + w J.
    tol : float
        A modulus within `tol` of 1 counts as neutral, neither leaving nor returning.

    Returns
    -------
    dict
        The number of equilibria, their largest residual after one layer, smallest numerical
        rank, smallest sigma_N/sigma_1 and its ratio to the rank cut N eps, largest stable
        rank and the bound on it, how many have a direction that leaves (|lambda| > 1) and
        one that returns (|lambda| < 1), and the smallest and largest |lambda| of the
        paper's branch (all signs -1).

    Examples
    --------
    >>> row = equilibria_summary(2, 2.0)
    >>> row["equilibria"], row["min numerical rank"], row["with |λ| > 1"]
    (2, 2, 1)
    """
    Xs = torch.stack([equilibrium(N, w, signs) for signs in sign_patterns(N)])
    moduli = [stability_modes(X, w)[0].abs() for X in Xs]
    worst = float(conditioning(Xs).min())
    return {
        "equilibria": len(Xs),
        "max residual": max(residual(X, w) for X in Xs),
        "min numerical rank": int(_metrics.numerical_rank(Xs).min()),
        "min σ_N/σ_1": worst,
        "σ_N/(N·eps·σ_1)": worst / (N * torch.finfo(torch.float64).eps),
        "max sr": float(_metrics.stable_rank(Xs).max()),
        "sr bound": stable_rank_bound(N, w),
        "with |λ| > 1": sum(bool((m > 1 + tol).any()) for m in moduli),
        "with |λ| < 1": sum(bool((m < 1 - tol).any()) for m in moduli),
        "paper's branch: min |λ|": float(moduli[0].min()),
        "paper's branch: max |λ|": float(moduli[0].max()),
    }


def rank_family(N: int, w: float) -> pd.DataFrame:
    """The equilibria of every rank k = 1..N at one shear (w >= N), one row per k: their
    residual after one layer, numerical rank and sigma_k / sigma_1, the smallest singular
    value that should not vanish.

    Examples
    --------
    >>> rank_family(3, 3.0)["numerical rank"].tolist()
    [1, 2, 3]
    """
    rows = {}
    for k in range(1, N + 1):
        X = equilibrium(N, w, rank=k)
        s = torch.linalg.svdvals(X)
        rows[k] = {"residual": residual(X, w), "numerical rank": int(_metrics.numerical_rank(X)),
                   "σ_k/σ_1": float(s[k - 1] / s[0])}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("rank k")


def stability_probe(N: int, w: float, eps: float, steps: int) -> dict:
    """Every equilibrium of size N perturbed by eps along each eigen-direction of its
    linearised map, both signs, and followed for `steps` layers: what the linearisation
    leaves open along |lambda| = 1.

    Returns
    -------
    dict
        {signs (tuple): (moduli (2M,), distances (steps + 1, 2M))}: the M eigenvalue moduli
        repeated for the + and - directions, and ||X_t - X*||_F of each run.

    Examples
    --------
    >>> moduli, distances = stability_probe(2, 2.0, 1e-3, 5)[(-1,)]
    >>> moduli.shape, distances.shape
    (torch.Size([4]), torch.Size([6, 4]))
    """
    probe = {}
    for signs in sign_patterns(N):
        X = equilibrium(N, w, signs)
        values, directions = stability_modes(X, w)
        both = torch.cat([directions, -directions])
        probe[tuple(signs)] = (values.abs().repeat(2), perturb_and_iterate(X, w, both, eps, steps))
    return probe


def power_norms(W: torch.Tensor, ts) -> list[float]:
    """||W^t||_2 for each t in `ts`: whether the products of a value matrix stay bounded (A3).

    Examples
    --------
    >>> [round(x, 3) for x in power_norms(value_matrix(2, 2.0), [1, 100])]
    [2.414, 200.005]
    """
    return [float(torch.linalg.matrix_norm(torch.linalg.matrix_power(W, t), ord=2)) for t in ts]


def random_orthogonal(d: int, seed: int) -> torch.Tensor:
    """A d x d orthogonal matrix drawn from the uniform (Haar) law, float64, from `seed`.

    Why this law: the rebuttal's rotation Z^T W Z is stated for any orthogonal Z; a Haar
    draw favours no direction, so a coordinate of (0, 1) Z lands near 0 only by chance.

    Examples
    --------
    >>> Z = random_orthogonal(3, seed=0)
    >>> bool(torch.allclose(Z @ Z.T, torch.eye(3, dtype=torch.float64)))
    True
    """
    d = check_int("d", d, minimum=1)
    G = torch.randn(d, d, generator=_generator(seed), dtype=torch.float64)
    Q, R = torch.linalg.qr(G)
    return Q * torch.sign(torch.diagonal(R))  # the sign fix that makes QR's Q Haar


def rotation_gap(X0: torch.Tensor, W_V: torch.Tensor, Z: torch.Tensor, steps: int) -> torch.Tensor:
    """Largest ||X_Z(t) - X(t) Z||_F / ||X(t)||_F over t = 0..steps: how far the run started at
    X0 Z with value matrix Z^T W_V Z strays from the rotated run X(t) Z (Wu et al.'s reply to
    their reviewer's Q2 says it never does).

    Both runs are the layers of `iterate` with LayerNorm, stepped side by side; nothing but
    the running maximum is kept. X0 (..., N, d), W_V and Z (..., d, d) broadcast together
    (put the Z's on their own leading dim); the result has the broadcast batch shape.

    Examples
    --------
    >>> X0 = angle_grid_states([200.0, 300.0])
    >>> Z = random_orthogonal(2, seed=1)
    >>> bool(rotation_gap(X0, value_matrix(2, 2.0), Z, 50).max() < 1e-14)
    True
    """
    check_matrix("X0", X0)
    check_matrix("Z", Z, square=True)
    steps = check_int("steps", steps, minimum=0)
    X, W_V, Z = X0.double(), W_V.double(), Z.double()
    rotated, W_Z, counts = X @ Z, Z.transpose(-1, -2) @ W_V @ Z, _counts(X0.shape[-2])

    def gap(X, rotated):
        return torch.linalg.vector_norm(rotated - X @ Z, dim=(-2, -1)) / torch.linalg.vector_norm(
            X, dim=(-2, -1)
        )

    worst = gap(X, rotated)
    with use_threads(1), torch.no_grad():
        for _ in range(steps):
            X, rotated = _layer(X, W_V, counts, True), _layer(rotated, W_Z, counts, True)
            worst = torch.maximum(worst, gap(X, rotated))
    return worst
