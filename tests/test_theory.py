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
    for bound in (theory.theorem1_bound(t, 0.3, 2, C=2.5),):
        assert bound[0] == pytest.approx(2.5)
        assert np.all(np.diff(bound) < 0)
    np.testing.assert_allclose(theory.theorem1_bound(t, 0.3, 2), (1 - 0.09) ** (t / 2))


def test_epsilon_is_the_smallest_allowed_weight():
    A = torch.tensor([[1.0, 0.0, 0.0], [0.7, 0.3, 0.0], [0.05, 0.9, 0.05]], dtype=torch.float64)
    assert theory.epsilon(A, masks.make("causal", 3)) == 0.05
    assert theory.epsilon(A) == 0.0  # without a mask, the forbidden zeros count
    assert theory.epsilon(torch.stack([A, A / 2]), masks.make("causal", 3)).tolist() == [
        0.05,
        0.025,
    ]


def fitted_slope(mu: torch.Tensor) -> float:
    """Least-squares slope of log mu over the layers where mu / mu(0) > 1e-10."""
    log_mu = mu.log().numpy()
    keep = mu.numpy() / mu[0].item() > 1e-10
    t = np.arange(len(log_mu))[keep]
    return np.polyfit(t, log_mu[keep], 1)[0]


@pytest.mark.parametrize("name", ["complete", "causal", "sliding_window", "causal_sliding_window"])
def test_theorem1_holds_on_the_fast_toy(name):
    """Chapter 01's fast set: N = d = 16, d_QK = 1, orthogonal W_V; slope <= bound + 1e-3."""
    N = 16
    X0 = torch.randn(
        N, N, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    ) / math.sqrt(N)
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
    A = (
        torch.tril(torch.ones(N, N, dtype=torch.float64))
        / torch.arange(1, N + 1, dtype=torch.float64)[:, None]
    )
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


def test_run_epsilon_is_the_minimum_over_layers_skipping_t0():
    history = torch.tensor(
        [[math.nan, math.nan], [0.3, 0.2], [0.1, 0.4], [0.2, 0.05]], dtype=torch.float64
    )
    np.testing.assert_array_equal(theory.run_epsilon(history), [0.1, 0.05])
    with pytest.raises(ParameterError, match="eps_history must hold layers 0..L"):
        theory.run_epsilon(torch.tensor([math.nan]))


def test_run_epsilon_matches_a_simulation():
    N = 6
    mask = masks.make("causal_sliding_window", N)
    X0 = torch.randn(2, N, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    run = san.simulate(
        X0, san.SANConfig(d=8, n_layers=4), mask=mask, d_qk=1.0, record_epsilon=True
    )
    eps = theory.run_epsilon(run["epsilon"])
    assert eps.shape == (2,)
    assert np.all(
        (eps > 0) & (eps <= 0.5)
    )  # two allowed keys per row at most (token 0 has one, weight 1)
    np.testing.assert_array_equal(eps, run["epsilon"][1:].amin(0).numpy())


def test_mask_table_reads_the_graph_properties():
    N = 8
    table = theory.mask_table(
        {
            "complete": masks.make("complete", N),
            "causal": masks.make("causal", N),
            "sliding_window": masks.make("sliding_window", N),
            "causal_sliding_window": masks.make("causal_sliding_window", N),
            "dilated": masks.make("dilated_sliding_window", N, dilation=2),
        }
    )
    assert table["radius"].tolist() == [1, 1, 4, 7, math.inf]
    assert table["diameter"].tolist() == [1, math.inf, 7, math.inf, math.inf]
    assert table["centers"].tolist() == [8, 1, 8, 1, 0]
    assert table["strongly_connected"].tolist() == [True, False, True, False, False]
    assert table["quasi_strongly_connected"].tolist() == [True, True, True, True, False]
    with pytest.raises(ParameterError, match="named_masks must name at least one mask"):
        theory.mask_table({})


def test_layernorm_rate_picks_the_theorem_whose_hypotheses_hold():
    N = 8
    complete, causal = masks.make("complete", N), masks.make("causal", N)
    rate, source = theory.layernorm_rate(complete, 0.01, d=16, nonnegative_cosines=False)
    assert source == "Theorem 2" and rate == pytest.approx(theory.theorem2_rate(0.01, 1, N))
    # N > d rules Theorem 2 out; non-negative cosines let Corollary 1 (with N centers) take over
    rate, source = theory.layernorm_rate(complete, 0.01, d=4, nonnegative_cosines=True)
    assert source == "Corollary 1" and rate == pytest.approx(
        theory.corollary1_rate(0.01, 1, n_centers=N)
    )
    rate, source = theory.layernorm_rate(causal, 0.05, d=16, nonnegative_cosines=True)
    assert source == "Corollary 1" and rate == pytest.approx(math.log(1 - 0.05**2) / 2)
    rate, source = theory.layernorm_rate(causal, 0.05, d=16, nonnegative_cosines=False)
    assert (
        math.isnan(rate)
        and "not strongly connected" in source
        and "some initial cosine < 0" in source
    )
    rate, source = theory.layernorm_rate(
        masks.make("dilated_sliding_window", N, dilation=2), 0.05, d=16, nonnegative_cosines=True
    )
    assert math.isnan(rate) and "no center" in source
    rate, source = theory.layernorm_rate(
        complete, 0.2, d=16, nonnegative_cosines=False
    )  # N eps = 1.6 >= 1
    assert math.isnan(rate) and "N eps = 1.6 >= 1" in source
    rate, source = theory.layernorm_rate(
        complete, 0.01, d=16, nonnegative_cosines=False, full_rank=False
    )
    assert math.isnan(rate) and "X0 not of full rank" in source


def test_layernorm_rate_with_underflowed_eps_guarantees_nothing():
    rate, source = theory.layernorm_rate(
        masks.make("complete", 4), 0.0, d=8, nonnegative_cosines=False
    )
    assert (rate, source) == (0.0, "Theorem 2")
    rate, source = theory.layernorm_rate(
        masks.make("causal", 4), 0.0, d=8, nonnegative_cosines=True
    )
    assert (rate, source) == (0.0, "Corollary 1")
    with pytest.raises(ParameterError, match=r"eps must be in \[0, 1\]"):
        theory.layernorm_rate(masks.make("causal", 4), 1.5, d=8, nonnegative_cosines=True)
    with pytest.raises(ParameterError, match="eps must be a number >= 0"):
        theory.layernorm_rate(masks.make("causal", 4), -0.1, d=8, nonnegative_cosines=True)


def test_orthogonality_defect_is_zero_for_orthogonal_maps_and_marchenko_pastur_for_iid():
    gen = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(64, 64, generator=gen, dtype=torch.float64))
    assert theory.orthogonality_defect(5 * q).item() < 1e-13
    assert theory.orthogonality_defect(q[:, :8]).item() < 1e-13  # orthonormal columns
    # uniform i.i.d. entries: sqrt(n / m) for an m x n matrix, up to finite-size terms
    W = torch.rand(2, 768, 64, generator=gen, dtype=torch.float64) * 2 - 1
    defect = theory.orthogonality_defect(W)
    assert defect.shape == (2,)
    assert defect.numpy() == pytest.approx([math.sqrt(64 / 768)] * 2, rel=0.05)
    square = theory.orthogonality_defect(torch.rand(256, 256, generator=gen) * 2 - 1).item()
    assert square == pytest.approx(1.0, rel=0.1)
