"""RMSNorm with gain, Gaussian value weights and Dong et al.'s doubly exponential bound: the
library pieces the chapter on the rebuttal's open questions uses, and its runs
(collapse.rebuttal) on small cases with known answers."""

import math

import numpy as np
import pytest
import torch

from collapse import attention, counterexample, masks, rebuttal, rng, san, theory
from collapse.checks import ParameterError


def test_rms_layernorm_matches_the_hand_formula_with_gain_and_eps():
    X = torch.tensor([[3.0, 4.0], [1.0, -1.0]], dtype=torch.float64)
    gain = torch.tensor([2.0, 0.5], dtype=torch.float64)
    # rms of (3, 4) is sqrt(25 / 2); of (1, -1) it is 1
    expected = torch.tensor(
        [[3 / math.sqrt(12.5) * 2, 4 / math.sqrt(12.5) * 0.5], [2.0, -0.5]], dtype=torch.float64
    )
    torch.testing.assert_close(attention.rms_layernorm(X, weight=gain), expected)
    with_eps = attention.rms_layernorm(X, eps=0.5)
    torch.testing.assert_close(with_eps[1], torch.tensor([1.0, -1.0]).double() / math.sqrt(1.5))


def test_rms_layernorm_without_gain_is_sqrt_d_times_the_scale_only_layernorm():
    X = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(
        attention.rms_layernorm(X), math.sqrt(7) * attention.scale_layernorm(X)
    )
    assert attention.LAYERNORMS["rms"] is attention.rms_layernorm
    with pytest.raises(ParameterError):
        attention.rms_layernorm(X, eps=-1.0)


def test_a_post_rms_layer_equals_the_formula_with_the_layer_gain():
    config = san.SANConfig(d=4, n_layers=1, variant="ln", layernorm="rms", ln_eps=0.0)
    w = san.init_layer(config, 0, seed=3)
    w.ln1_weight = torch.tensor([1.0, 2.0, 0.5, -1.0], dtype=torch.float64)
    X = torch.randn(5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out, A = san.apply_layer(X, w, config)
    Y = A[0] @ X @ w.W_V
    expected = Y / Y.pow(2).mean(-1, keepdim=True).sqrt() * w.ln1_weight
    torch.testing.assert_close(out, expected)
    # without a gain, simulate's tokens have norm sqrt(d) at every layer
    deep = san.SANConfig(d=4, n_layers=6, variant="ln", layernorm="rms", ln_eps=0.0)
    final = san.simulate(X, deep, seed=0).final
    torch.testing.assert_close(final.norm(dim=-1), torch.full((5,), 2.0, dtype=torch.float64))


def test_gaussian_value_weights_have_variance_one_over_d_and_are_reproducible():
    d = 256
    config = san.SANConfig(d=d, n_layers=2, init="gaussian_v")
    w = san.init_layer(config, 1, seed=5)
    # d^2 = 65536 entries: the sample mean and variance are within a few standard errors
    assert abs(float(w.W_V.mean())) < 4 / d / math.sqrt(d)
    assert abs(float(w.W_V.var()) * d - 1) < 0.03
    # fourth moment of a Gaussian: 3 sigma^4 (a uniform law would give 1.8)
    kurtosis = float((w.W_V**4).mean() / w.W_V.var() ** 2)
    assert abs(kurtosis - 3) < 0.1
    again = san.init_layer(config, 1, seed=5)
    torch.testing.assert_close(w.W_V, again.W_V, rtol=0, atol=0)
    other = san.init_layer(config, 1, seed=6)
    assert not torch.equal(w.W_V, other.W_V)


def test_gaussian_v_keeps_the_default_query_and_key_draws_bit_for_bit():
    base = san.init_layer(san.SANConfig(d=8, n_layers=1), 0, seed=[0, 1])
    gauss = san.init_layer(san.SANConfig(d=8, n_layers=1, init="gaussian_v"), 0, seed=[0, 1])
    assert torch.equal(base.W_Q, gauss.W_Q) and torch.equal(base.W_K, gauss.W_K)
    assert not torch.equal(base.W_V, gauss.W_V)
    # the other inits are unchanged: torch_default's W_V is still U(+-1/sqrt(d))
    assert float(base.W_V.abs().max()) <= 1 / math.sqrt(8)


def test_composite_norm_residual_and_beta_by_hand():
    X = torch.tensor([[1.0, -2.0], [3.0, 0.0]], dtype=torch.float64)
    # column sums of |X|: 4, 2; row sums: 3, 3 -> sqrt(4 * 3)
    assert float(theory.composite_norm(X)) == pytest.approx(math.sqrt(12))
    # X - mean = [[-1, -1], [1, 1]]: column sums 2, 2; row sums 2, 2
    assert float(theory.dong_residual(X)) == pytest.approx(2.0)
    eye = torch.eye(2, dtype=torch.float64)
    W_Q = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=torch.float64)
    # W_Q W_K^T = W_Q: largest column sum 3; ||I||_{1,inf} = 1
    assert float(theory.dong_beta(W_Q, eye, eye)) == pytest.approx(3.0)


def test_dong_log_bound_on_a_small_case():
    # c = 4 * 1 * 2 / sqrt(4) = 4, res0 = 0.1: t = 1 gives c * res0^3, t = 2 gives c^4 res0^9
    got = theory.dong_log_bound([0, 1, 2], math.log(0.1), 2.0, d_qk=4.0)
    np.testing.assert_allclose(np.exp(got), [0.1, 4 * 0.1**3, 4**4 * 0.1**9], rtol=1e-12)
    # it decreases iff res0 sqrt(c) < 1: at res0 = 1 / sqrt(c) every layer gives res0
    flat = theory.dong_log_bound(np.arange(5), math.log(0.5), 2.0, d_qk=4.0)
    np.testing.assert_allclose(flat, math.log(0.5))
    rising = theory.dong_log_bound([1000], math.log(0.6), 2.0, d_qk=4.0)
    falling = theory.dong_log_bound([1000], math.log(0.4), 2.0, d_qk=4.0)
    assert rising[0] == math.inf and falling[0] == -math.inf
    with pytest.raises(ParameterError):
        theory.dong_log_bound([-1], 0.0, 1.0)


def test_rms_gain_one_is_sqrt_d_times_layernorm_with_the_scores_times_d():
    """RMSNorm (gain 1) from sqrt(d) X0 is sqrt(d) times scale-only LN from X0 with d_QK / d^2:
    the scores of sqrt(d)-long tokens are d times larger, the values' scale LN removes."""
    d, n = 4, 5
    X0 = attention.scale_layernorm(
        torch.randn(2, n, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    )
    mask = masks.make("causal", n)
    runs = []
    for layernorm, scale, d_qk in (("rms", math.sqrt(d), 1.0), ("scale", 1.0, d**-2.0)):
        config = san.SANConfig(
            d=d, n_layers=12, variant="ln", layernorm=layernorm, ln_eps=0.0,
            init="orthogonal_v", qk_gain=math.sqrt(d),
        )  # fmt: skip
        runs.append(san.simulate(scale * X0, config, mask=mask, d_qk=d_qk, seed=[0, 1]))
    torch.testing.assert_close(runs[0].final, math.sqrt(d) * runs[1].final, rtol=0, atol=1e-12)
    torch.testing.assert_close(runs[0]["mu"], math.sqrt(d) * runs[1]["mu"], rtol=1e-10, atol=0)


def test_layernorm_jumps_where_a_singular_value_matrix_sends_the_tokens_apart():
    """W_V(s) = [[s, 3], [0, 1]], token 1 at (0, 1), token 2 at 135 degrees: at s = 0 the first
    layer sends token 2 to (0, -1), so the second layer's vector before LN is ~ s and token 2
    lands on either side of the circle; without LN it moves by ~ s."""
    X0 = counterexample.angle_grid_states([135.0])[0]

    def token2(s, layernorm):
        W = torch.tensor([[s, 3.0], [0.0, 1.0]], dtype=torch.float64)
        return counterexample.iterate(X0, W, 2, layernorm=layernorm)[1]

    for delta in (1e-3, 1e-9):
        jump = torch.linalg.norm(token2(delta, True) - token2(-delta, True))
        assert float(jump) == pytest.approx(2.0, abs=1e-4)
        drift = torch.linalg.norm(token2(delta, False) - token2(-delta, False))
        assert float(drift) < 2 * delta
    # the counterexample's own matrices are invertible: no jump between neighbours
    W = counterexample.value_matrix(2, 2.0)
    near = counterexample.value_matrix(2, 2.0 + 1e-9)
    steps = counterexample.iterate(X0, W, 2) - counterexample.iterate(X0, near, 2)
    assert float(steps.abs().max()) < 1e-8


def test_bisect_narrows_to_adjacent_floats_around_the_change():
    low, high = rebuttal.bisect(lambda x: x > math.pi, 0.0, 4.0)
    assert low <= math.pi < high and np.nextafter(low, 5.0) == high


def test_end_state_tells_zero_from_a_common_token_and_from_no_collapse():
    run = {  # (layer, seed, mask): one seed, three masks
        "frobenius": np.array([[[1.0, 1.0, 1.0]], [[1e-12, 0.5, 0.5]]]),
        "relative_mu": np.array([[[0.5, 0.5, 0.5]], [[np.nan, 1e-12, 0.3]]]),
    }
    states = rebuttal.end_state(run, 1e-10)
    assert states.tolist() == [["zero", "common token", "not collapsed"]]


def test_the_linear_case_decays_at_the_second_eigenvalue():
    mask = masks.make("causal", 6)
    lam2 = rebuttal.second_eigenvalue(mask)
    X0 = torch.randn(2, 6, 6, generator=rng.generator(0), dtype=torch.float64)
    mu = rebuttal.linear_run(X0, mask[None], 30)[:, :, 0]  # 2^-30: above the floor
    rate = np.log(mu[-1] / mu[-11]) / 10  # per layer, late in the run
    assert rate == pytest.approx(math.log(lam2), rel=1e-3)


def test_rmsnorm_with_a_gain_is_scale_only_layernorm_with_diag_gain_times_w_v():
    X = counterexample.angle_grid_states(np.arange(7.5, 360.0, 15.0))  # none on the basin boundary
    W_V = counterexample.value_matrix(2, 2.0)
    rms, scale_only = rebuttal.rms_counterexample(X, W_V, (1.0, 0.5), 40)
    torch.testing.assert_close(rms, scale_only, rtol=0, atol=1e-10)
    rms_unit, _ = rebuttal.rms_counterexample(X, W_V, (1.0, 1.0), 40)
    scale_only_unit = math.sqrt(2) * counterexample.iterate(X, W_V, 40)
    torch.testing.assert_close(rms_unit, scale_only_unit, rtol=0, atol=1e-10)
