import math

import numpy as np
import pytest
import torch

from collapse import masks, san, theory
from collapse.checks import ParameterError


def test_rates_by_hand():
    assert theory.theorem1_rate(0.5, 1) == pytest.approx(math.log(0.5))
    assert theory.theorem1_rate(0.5, 2) == pytest.approx(math.log(0.75) / 2)
    assert theory.theorem2_rate(0.1, 1, 5) == pytest.approx(math.log(1 - 5 * 0.01) / 2)
    assert theory.corollary1_rate(0.1, 2, n_centers=3) == pytest.approx(math.log(1 - 3 * 1e-4) / 4)
    assert theory.theorem1_rate(1.0, 1) == -math.inf


def test_bounds_start_at_C_and_decay():
    t = np.arange(10)
    for bound in (theory.theorem1_bound(t, 0.3, 2, C=2.5), theory.theorem2_bound(t, 0.1, 2, 4, C=2.5), theory.corollary1_bound(t, 0.3, 2, C=2.5)):
        assert bound[0] == pytest.approx(2.5)
        assert np.all(np.diff(bound) < 0)
    np.testing.assert_allclose(theory.theorem1_bound(t, 0.3, 2), (1 - 0.09) ** (t / 2))


def test_epsilon_is_the_smallest_allowed_weight():
    A = torch.tensor([[1.0, 0.0, 0.0], [0.7, 0.3, 0.0], [0.05, 0.9, 0.05]], dtype=torch.float64)
    assert theory.epsilon(A, masks.make("causal", 3)) == 0.05
    assert theory.epsilon(A) == 0.0  # without a mask, the forbidden zeros count
    assert theory.epsilon(torch.stack([A, A / 2]), masks.make("causal", 3)).tolist() == [0.05, 0.025]


def fitted_slope(mu: torch.Tensor) -> float:
    """Least-squares slope of log mu over the layers where mu / mu(0) > 1e-10 (PAPERS W1)."""
    log_mu = mu.log().numpy()
    keep = mu.numpy() / mu[0].item() > 1e-10
    t = np.arange(len(log_mu))[keep]
    return np.polyfit(t, log_mu[keep], 1)[0]


@pytest.mark.parametrize("name", ["complete", "causal", "sliding_window", "causal_sliding_window"])
def test_theorem1_holds_on_the_fast_toy(name):
    """PAPERS W1 fast set: N = d = 16, d_QK = 1, orthogonal W_V; slope <= bound slope + 1e-3."""
    N = 16
    X0 = torch.randn(N, N, generator=torch.Generator().manual_seed(0), dtype=torch.float64) / math.sqrt(N)
    mask = masks.make(name, N)
    config = san.SANConfig(d=N, n_layers=200, init="orthogonal_v")
    run = san.simulate(X0, config, mask=mask, d_qk=1.0, record_epsilon=True)
    eps = run["epsilon"][1:].min().item()
    r = masks.radius(mask)
    assert math.log(run["mu"][-1] / run["mu"][0]) <= -2
    assert fitted_slope(run["mu"]) <= theory.theorem1_rate(eps, r) + 1e-3


def test_linear_causal_averaging_collapses_at_least_as_fast_as_the_bound():
    """W_Q = W_K = 0, W_V = I: A averages the prefix, eps = 1/N, r = 1, true rate log(1/2)."""
    N = 8
    A = torch.tril(torch.ones(N, N, dtype=torch.float64)) / torch.arange(1, N + 1, dtype=torch.float64)[:, None]
    X = torch.randn(N, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mus = []
    for _ in range(30):
        mus.append(torch.linalg.vector_norm(X - X.mean(0)).item())
        X = A @ X
    eps = theory.epsilon(A, masks.make("causal", N)).item()
    assert eps == pytest.approx(1 / N)
    assert fitted_slope(torch.tensor(mus)) == pytest.approx(math.log(0.5), abs=0.05)
    assert fitted_slope(torch.tensor(mus)) <= theory.theorem1_rate(eps, 1)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: theory.theorem1_rate(0.0, 1), "eps must be a number > 0"),
        (lambda: theory.theorem1_rate(1.5, 1), r"eps must be in \(0, 1\]"),
        (lambda: theory.theorem1_rate(0.5, math.inf), "r must be a finite int >= 1"),
        (lambda: theory.theorem1_rate(0.5, 0), "r must be an int >= 1"),
        (lambda: theory.theorem2_rate(0.5, 1, 4), "Theorem 2 needs N \\* eps < 1"),
        (lambda: theory.corollary1_rate(0.9, 1, n_centers=2), "Corollary 1 needs n_centers"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ParameterError, match=match):
        call()
