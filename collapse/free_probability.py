"""Large-T limits of random attention from free probability: the quarter-circle law of a
Markov matrix's bulk, and the singular-value laws after one Mind-the-Gap layer.

Why apart: these are theory, parameter-free predictions that the simulations (`markov`,
`gap`) are held against, as `theory` holds Wu et al.'s bounds.
"""

from __future__ import annotations

import math

import numpy as np

from .checks import ParameterError, check_float

__all__ = [
    "quarter_circle_pdf",
    "quarter_circle_cdf",
    "ks_distance",
    "free_product_edge",
    "layer1_limits",
]


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
    """Kolmogorov-Smirnov distance between the samples' empirical CDF and the quarter-circle
    law."""
    x = np.sort(np.asarray(samples, dtype=float).ravel())
    if x.size == 0:
        raise ParameterError("samples must not be empty")
    F = quarter_circle_cdf(x)
    n = x.size
    return float(max((np.arange(1, n + 1) / n - F).max(), (F - np.arange(n) / n).max()))


def free_product_edge(gamma: float) -> float:
    """Right edge of MP(1) ⊠ MP(gamma): min over z > 0 of (1+z)^2 (1+gamma z) / z, at z = (sqrt(1+8
    gamma) - 1) / (4 gamma).

    Why: after the fix, T A⊥A⊥^T has the Marchenko-Pastur law of ratio 1 (the quarter-circle
    law of Mind the Gap), and X_0 W is a T x d Gaussian matrix (X_0 has orthonormal rows), whose
    Gram matrix has MP(gamma); the two are asymptotically free, so the squared singular values
    of X_1 = A⊥ X_0 W follow their free product, whose S-transform is 1/((1+z)(1+gamma z)).
    This is our derivation, not the paper's. gamma = 0 gives 4, gamma = 1 gives 27/4.
    """
    gamma = check_float("gamma", gamma, minimum=0.0)
    z = 1.0 if gamma == 0 else (math.sqrt(1 + 8 * gamma) - 1) / (4 * gamma)
    return (1 + z) ** 2 * (1 + gamma * z) / z


def layer1_limits(gamma: float) -> dict[str, dict[str, float]]:
    """Large-T limits of sr / T after one layer, for the fixed Markov layer and for Identity A.

    Why: a parameter-free prediction to hold the measured growth against (ours, not the
    paper's). With lambda the squared singular values normalised to mean 1,
    sr(X) / T -> 1 / lambda_max and sr(XX^T) / T -> E[lambda^2] / lambda_max^2, where
    A⊥: E[lambda^2] = 2 + gamma, lambda_max = free_product_edge(gamma);
    Identity A (X_1 = X_0 W, Gaussian): E[lambda^2] = 1 + gamma, lambda_max = (1 + sqrt(gamma))^2.
    Without the fix the outlier sigma_1 ~ 1 dominates and sr(XX^T) -> 1, sr(X) -> 2.
    """
    gamma = check_float("gamma", gamma, minimum=0.0)
    fixed, ident = free_product_edge(gamma), (1 + math.sqrt(gamma)) ** 2
    return {
        "fix": {"stable_rank": 1 / fixed, "gram_stable_rank": (2 + gamma) / fixed**2},
        "identity": {"stable_rank": 1 / ident, "gram_stable_rank": (1 + gamma) / ident**2},
    }
