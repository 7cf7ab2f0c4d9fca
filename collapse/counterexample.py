"""LayerNorm can prevent collapse: the constructions of Wu et al. Section 4.3.

Causal mask, W_Q = W_K = 0 (so token i averages tokens 1..i uniformly), scale-only
LayerNorm, and W_V = I + w * (ones on the superdiagonal) with w > 1.

In 2-D (Section 4.3.1) token 1 converges to (0, +-1). With token 1 at (0, 1), token 2
has two fixed points P+ = (-1/w, s) (unstable, the paper's A) and P- = (-1/w, -s)
(attracting, its B), s = sqrt(1 - 1/w^2); initial angles in (theta+, 270 deg), with
theta+ = 180 deg - arccos(1/w), converge to P-, every other angle collapses onto token 1.
`equilibrium` builds the N-token equilibria of Theorem 3 (every rank 1..N).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .attention import scale_layernorm
from .checks import ParameterError, check_float, check_int, check_matrix

__all__ = [
    "value_matrix",
    "causal_average",
    "step",
    "trajectory",
    "final_state",
    "fixed_points",
    "basin",
    "angle_grid_states",
    "equilibrium",
]


def _check_w(w) -> float:
    w = check_float("w", w, positive=True)
    if w <= 1:
        raise ParameterError(f"w must be a number > 1 (the construction needs it), got {w}")
    return w


def value_matrix(d: int, w: float) -> torch.Tensor:
    """W_V = I + w * superdiagonal of ones (d x d, float64)."""
    d = check_int("d", d, minimum=1)
    return torch.eye(d, dtype=torch.float64) + _check_w(w) * torch.diag(torch.ones(d - 1, dtype=torch.float64), 1)


def causal_average(N: int) -> torch.Tensor:
    """Attention with W_Q = W_K = 0 under a causal mask: A_ij = 1/i for j <= i (1-based)."""
    N = check_int("N", N, minimum=1)
    return torch.tril(torch.ones(N, N, dtype=torch.float64)) / torch.arange(1, N + 1, dtype=torch.float64)[:, None]


def step(X: torch.Tensor, w: float, layernorm: bool = True) -> torch.Tensor:
    """One layer X -> LN(A X W_V) (or A X W_V without LN), batched over leading dims."""
    check_matrix("X", X)
    X = (causal_average(X.shape[-2]) @ X.double()) @ value_matrix(X.shape[-1], w)
    return scale_layernorm(X) if layernorm else X


def trajectory(X0: torch.Tensor, w: float, steps: int, layernorm: bool = True) -> torch.Tensor:
    """All states X_0..X_steps, shape (steps + 1, *X0.shape)."""
    steps = check_int("steps", steps, minimum=0)
    states = [X0.double()]
    for _ in range(steps):
        states.append(step(states[-1], w, layernorm))
    return torch.stack(states)


def final_state(X0: torch.Tensor, w: float, steps: int, layernorm: bool = True) -> torch.Tensor:
    """X_steps without keeping the path (for long runs over many initial conditions)."""
    steps = check_int("steps", steps, minimum=0)
    X = X0.double()
    for _ in range(steps):
        X = step(X, w, layernorm)
    return X


def fixed_points(w: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(P+, P-) of token 2 when token 1 sits at (0, 1): (-1/w, +-sqrt(1 - 1/w^2))."""
    w = _check_w(w)
    s = math.sqrt(1 - 1 / w**2)
    return torch.tensor([-1 / w, s], dtype=torch.float64), torch.tensor([-1 / w, -s], dtype=torch.float64)


def basin(w: float) -> tuple[float, float]:
    """Open arc (degrees) of token 2's initial angles that converge to P- with token 1 at (0, 1)."""
    return 180.0 - math.degrees(math.acos(1 / _check_w(w))), 270.0


def angle_grid_states(theta_deg, token1=(0.0, 1.0)) -> torch.Tensor:
    """Initial states (len(theta), 2, 2): token 1 fixed, token 2 on the unit circle at each angle."""
    theta = torch.as_tensor(theta_deg, dtype=torch.float64).reshape(-1)
    token2 = torch.stack([torch.cos(torch.deg2rad(theta)), torch.sin(torch.deg2rad(theta))], dim=-1)
    token1 = torch.as_tensor(token1, dtype=torch.float64).expand_as(token2)
    return torch.stack([token1, token2], dim=-2)


def equilibrium(N: int, w: float, signs: Sequence[int] | None = None, rank: int | None = None) -> torch.Tensor:
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
            raise ParameterError(f"w={w} is too small for this construction at N={N}, rank={rank} (try w >= N)")
        X[i, -1] = signs[i - 1] * math.sqrt(rest)
    return X
