"""The runs behind the questions the rebuttal of Wu et al. (2024) left open (chapters 12, 13).

Five questions, each a batched run of `san.simulate` or `counterexample.iterate` with the
chapter's conventions fixed here: random value weights under scale-only LayerNorm
(`width_run`); whether a collapsing X vanishes or meets at a common token (`mask_run`,
`end_state`, `sphere_points`); exponential against doubly exponential collapse
(`softmax_run`, `linear_run`, `dong_residuals`, `second_eigenvalue`); the LayerNorm
discontinuity along a path of value matrices (`bisect`, `transition_width`,
`singular_path`, `same_side`); and RMSNorm with its gain (`rms_counterexample`,
`rms_run`). Every run is float64 and seeded by the `seeds` it is given.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from . import counterexample as ce
from . import markov, masks, metrics, san, theory

__all__ = [
    "COSINES",
    "WIDTH_METRICS",
    "width_run",
    "mask_run",
    "end_state",
    "sphere_points",
    "softmax_run",
    "dong_betas",
    "dong_residuals",
    "linear_run",
    "second_eigenvalue",
    "largest_step",
    "bisect",
    "transition_width",
    "singular_path",
    "same_side",
    "rms_counterexample",
    "rms_run",
]

# One minus the cosines of the tokens: the smallest over pairs, and the mean over pairs.
COSINES = ("one_minus_min_cos", "mean_one_minus_cos")
WIDTH_METRICS = ("mu", "mean_abs_cos", *COSINES)


def width_run(seeds, n_tokens: int, d: int, init: str, n_layers: int, qk_range: float,
              mask_names: Sequence[str]) -> dict[str, np.ndarray]:
    """Scale-only post-LN on `n_tokens` unit Gaussian tokens of width `d`.

    W_Q, W_K ~ U(+-qk_range) and scores over sqrt(d): the score between two unit tokens has
    the same spread at every width, so only the value weights (`init`) change with it.

    Returns
    -------
    dict
        Each of `WIDTH_METRICS` per layer, shape (n_layers + 1, seed, mask).
    """
    config = san.SANConfig(d=d, n_layers=n_layers, variant="ln", init=init,
                           qk_gain=qk_range * math.sqrt(d))
    X0 = theory.gaussian_tokens(seeds, n_tokens, d, unit=True)[:, None]
    mask = torch.stack([masks.make(m, n_tokens) for m in mask_names])
    res = san.simulate(X0.expand(-1, len(mask_names), -1, -1), config, mask=mask,
                       d_qk=float(d), seed=seeds, metrics=WIDTH_METRICS)
    return {m: res[m].numpy() for m in WIDTH_METRICS}


def mask_run(seeds, mask_by_name: dict, init: str, variant: str, n_layers: int,
             extra: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Pure attention (`variant` "attention") or scale-only post-LN ("ln") with d = N, d_QK = 1
    and W_Q, W_K PyTorch's default, from Gaussian tokens (unit ones under LN), every mask.

    Parameters
    ----------
    mask_by_name : dict
        Name -> (N, N) bool mask; N is the number of tokens.
    extra : sequence of str
        Metrics to record besides frobenius, relative_mu and mu.

    Returns
    -------
    dict
        Metric -> array (n_layers + 1, seed, mask).
    """
    n_tokens = next(iter(mask_by_name.values())).shape[-1]
    config = san.SANConfig(d=n_tokens, n_layers=n_layers, init=init, variant=variant)
    X0 = theory.gaussian_tokens(seeds, n_tokens, n_tokens, unit=variant == "ln")
    res = san.simulate(X0[:, None].expand(-1, len(mask_by_name), -1, -1), config,
                       mask=torch.stack(list(mask_by_name.values())), d_qk=1.0, seed=seeds,
                       metrics=("frobenius", "relative_mu", "mu", *extra))
    return {k: v.numpy() for k, v in res.metrics.items()}


def end_state(run: dict, cut: float) -> np.ndarray:
    """The last layer of a `mask_run`, labelled per (seed, mask): "zero" where
    ||X_L||_F < cut ||X_0||_F, else "common token" where mu / ||X_L||_F < cut, else
    "not collapsed"."""
    F, R = run["frobenius"], run["relative_mu"]
    zero = F[-1] < cut * F[0]
    common = ~zero & (np.nan_to_num(R[-1], nan=1.0) < cut)
    return np.where(zero, "zero", np.where(common, "common token", "not collapsed"))


def sphere_points(run: dict, cut: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A LayerNorm run's 1 - min cos, mu^2 and whether its mu ends below `cut` mu_0, at every
    layer and run where mu is above `cut` mu_0 (flat arrays): the points of the identity
    2 g / N <= mu^2 <= (N - 1) g."""
    mu = run["mu"]
    keep, ends = mu > cut * mu[:1], np.broadcast_to(mu[-1] < cut * mu[0], mu.shape)
    return run["one_minus_min_cos"][keep], mu[keep] ** 2, ends[keep]


def _softmax_config(n_tokens: int, n_layers: int, init: str) -> san.SANConfig:
    # d = N and W_Q, W_K ~ U(+-1) with d_QK = 1: chapter 04's scores.
    return san.SANConfig(d=n_tokens, n_layers=n_layers, init=init, qk_gain=math.sqrt(n_tokens))


def softmax_run(X0: torch.Tensor, seeds, init: str, mask: torch.Tensor,
                n_layers: int) -> np.ndarray:
    """mu per layer of softmax pure attention from X0 (seed, N, N), d_QK = 1, W_Q, W_K ~ U(+-1).

    `mask` is (N, N), giving (n_layers + 1, seed), or a stack (mask, N, N), giving
    (n_layers + 1, seed, mask).
    """
    config = _softmax_config(X0.shape[-1], n_layers, init)
    if mask.dim() == 3:
        X0 = X0[:, None].expand(-1, len(mask), -1, -1)
    res = san.simulate(X0, config, mask=mask, d_qk=1.0, seed=seeds, metrics=("mu",))
    return res["mu"].numpy()


def dong_betas(seeds, n_tokens: int, init: str, n_layers: int) -> np.ndarray:
    """Dong et al.'s beta per seed for the weights of `softmax_run`: the largest over the
    layers of ||W_Q W_K^T||_1 ||W_V||_{1,inf} (`theory.dong_beta`)."""
    layers = san.init_layers(_softmax_config(n_tokens, n_layers, init), seeds)
    return torch.stack([theory.dong_beta(w.W_Q, w.W_K, w.W_V) for w in layers]).amax(0).numpy()


def dong_residuals(X0: torch.Tensor, seed: int, init: str, mask: torch.Tensor,
                   n_layers: int) -> torch.Tensor:
    """Dong et al.'s residual res(X_t), t = 0..n_layers, of one seed's `softmax_run` from X0
    (N, N), layer by layer (`theory.dong_residual`)."""
    config = _softmax_config(X0.shape[-1], n_layers, init)
    X, out = X0, [theory.dong_residual(X0)]
    for w in san.init_layers(config, seed=seed):
        X = san.apply_layer(X, w, config, mask, 1.0)[0]
        out.append(theory.dong_residual(X))
    return torch.stack(out)


def linear_run(X0: torch.Tensor, mask: torch.Tensor, n_layers: int) -> np.ndarray:
    """mu per layer of the linear case W_Q = W_K = 0, W_V = I, where A is the row-normalised
    mask P in every layer and X_t = P^t X_0; X0 (seed, N, N), `mask` a stack (mask, N, N).

    Returns
    -------
    numpy.ndarray
        mu, shape (n_layers + 1, seed, mask).
    """
    n = X0.shape[-1]
    zero = torch.zeros(n, n, dtype=torch.float64)
    identity = san.LayerWeights(zero, zero, torch.eye(n, dtype=torch.float64))
    res = san.simulate(X0[:, None].expand(-1, len(mask), -1, -1),
                       san.SANConfig(d=n, n_layers=n_layers), mask=mask,
                       weights=itertools.repeat(identity, n_layers))
    return res["mu"].numpy()


def second_eigenvalue(mask: torch.Tensor) -> float:
    """|lambda_2| of the row-normalised mask P = D^-1 M: the linear case's rate of collapse."""
    return float(markov.eigenvalues(mask.double() / mask.sum(-1, keepdim=True))[1].abs())


def largest_step(mu_w: np.ndarray) -> float:
    """Largest change of mu between neighbouring points of a path, relative to mu's range."""
    return float(np.abs(np.diff(mu_w)).max() / max(np.abs(mu_w).max(), 1e-300))


def bisect(side: Callable[[float], bool], low: float, high: float,
           steps: int = 80) -> tuple[float, float]:
    """[low, high] narrowed around the point where `side`, a bool of a float, changes (down
    to adjacent float64 numbers)."""
    s_low = side(low)
    for _ in range(steps):
        mid = (low + high) / 2
        if mid in (low, high):
            break
        low, high = (mid, high) if side(mid) == s_low else (low, mid)
    return low, high


def _counterexample_mu(X_start: torch.Tensor, w: float, depth: int) -> float:
    W = torch.tensor([[1.0, w], [0.0, 1.0]], dtype=torch.float64)
    return float(metrics.mu(ce.iterate(X_start, W, depth))[0])


def transition_width(X_start: torch.Tensor, depth: int, limit: float,
                     levels: tuple[float, float] = (0.9, 0.1)) -> float:
    """How wide in w, along the counterexample's path W_V(w) = [[1, w], [0, 1]] on [1, 2], the
    rise of mu(X_depth) is: w where it passes levels[0] * limit minus w where it passes
    levels[1] * limit, each found by bisection. X_start is (1, 2, 2)."""
    ends = [bisect(lambda w, c=c: _counterexample_mu(X_start, w, depth) > c * limit, 1.0, 2.0)[0]
            for c in levels]
    return ends[0] - ends[1]


def singular_path(X_start: torch.Tensor, s: float, w: float, depth: int,
                  layernorm: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The counterexample's two tokens under W_V(s) = [[s, w], [0, 1]], singular at s = 0.

    Returns
    -------
    tuple of torch.Tensor
        The tokens X_0..X_depth, (depth + 1, 2, 2), and token 2's vector before LayerNorm
        at layers 1..depth, its norm (depth,).
    """
    W = torch.tensor([[s, w], [0.0, 1.0]], dtype=torch.float64)
    X = ce.iterate(X_start, W, depth, layernorm=layernorm, keep_path=True)
    return X, torch.linalg.norm((X[:-1, 0] + X[:-1, 1]) / 2 @ W, dim=-1)


def same_side(X_start: torch.Tensor, s: float, w: float, depth: int) -> bool:
    """Whether token 2 ends on token 1's side (cosine > 0) under W_V(s): the tokens collapse."""
    X = singular_path(X_start, s, w, depth)[0][-1]
    return bool((X[0] @ X[1]) > 0)


def rms_counterexample(X: torch.Tensor, W_V: torch.Tensor, gain, n_layers: int):
    """The counterexample (two tokens, causal mask, W_Q = W_K = 0) under RMSNorm with `gain`,
    and the same from the scale-only dynamics with value matrix diag(gain) W_V (after a first
    layer with W_V), scaled back by sqrt(2) and the gain: the two should agree.

    Returns
    -------
    tuple of torch.Tensor
        The RMSNorm run's last tokens and the scale-only prediction, each shaped like X.
    """
    g = torch.as_tensor(gain, dtype=torch.float64)
    zero = torch.zeros(2, 2, dtype=torch.float64)
    config = san.SANConfig(d=2, n_layers=n_layers, variant="ln", layernorm="rms", ln_eps=0.0)
    w = san.LayerWeights(zero, zero, W_V, ln1_weight=g)
    res = san.simulate(X, config, mask=masks.make("causal", 2), weights=[w] * n_layers)
    U = ce.iterate(ce.iterate(X, W_V, 1), torch.diag(g) @ W_V, n_layers - 1)
    return res.final, math.sqrt(2) * U * g


def rms_run(X: torch.Tensor, layernorm: str, mask: torch.Tensor, seeds, n_layers: int,
            gain=None, d_qk: float = 1.0) -> san.Simulation:
    """Chapter 04's setting (orthogonal W_V, W_Q, W_K ~ U(+-1)) under `layernorm` ("scale" or
    "rms", with `gain` (seed, d) in every layer, absent: 1), without epsilon, from X (seed,
    ..., N, d) under a stack of masks."""
    d = X.shape[-1]
    config = san.SANConfig(d=d, n_layers=n_layers, variant="ln", layernorm=layernorm,
                           ln_eps=0.0, init="orthogonal_v", qk_gain=math.sqrt(d))
    weights = (dataclasses.replace(w, ln1_weight=gain) for w in san.init_layers(config, seeds))
    return san.simulate(X, config, mask=mask, d_qk=d_qk, seed=seeds, weights=weights)
