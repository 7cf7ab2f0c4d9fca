import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from collapse import metrics
from collapse.checks import ParameterError


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_mu_by_hand():
    assert metrics.mu(t([[1, 0], [-1, 0]])) == pytest.approx(math.sqrt(2))
    assert metrics.mu(t([[1, 2], [3, 4]])) == pytest.approx(2.0)  # deviations (-1,-1), (1,1)
    assert metrics.mu(t([[5, -2], [5, -2], [5, -2]])) == 0
    assert metrics.relative_mu(t([[1, 2], [3, 4]])) == pytest.approx(2 / math.sqrt(30))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 8), d=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_mu_equals_pairwise_form_and_ignores_shifts(n, d, seed):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    pairwise = (X[:, None, :] - X[None, :, :]).pow(2).sum() / (2 * n)
    torch.testing.assert_close(metrics.mu(X) ** 2, pairwise)
    shift = torch.randn(1, d, generator=g, dtype=torch.float64) * 100
    torch.testing.assert_close(metrics.mu(X + shift), metrics.mu(X), rtol=1e-9, atol=1e-9)


def test_stable_ranks_by_hand():
    assert metrics.stable_rank(torch.eye(5, dtype=torch.float64)) == pytest.approx(5)
    assert metrics.gram_stable_rank(torch.eye(5, dtype=torch.float64)) == pytest.approx(5)
    assert metrics.stable_rank(t([[3, 0], [0, 4]])) == pytest.approx(25 / 16)
    assert metrics.gram_stable_rank(t([[1, 0], [0, 2]])) == pytest.approx(17 / 16)
    rank_one = torch.outer(torch.arange(1.0, 5.0), torch.arange(1.0, 4.0))
    assert metrics.stable_rank(rank_one) == pytest.approx(1)
    assert metrics.numerical_rank(rank_one) == 1


def test_stable_rank_after_gaussian_map(gen):
    """Isometric X has sr = T; one square Gaussian map gives ~T/4 and ~T/8."""
    T = 400
    iso = torch.linalg.qr(torch.randn(T, T, generator=gen, dtype=torch.float64))[0]
    assert metrics.stable_rank(iso) == pytest.approx(T)
    Y = iso @ torch.randn(T, T, generator=gen, dtype=torch.float64)
    assert metrics.stable_rank(Y) == pytest.approx(T / 4, rel=0.15)
    assert metrics.gram_stable_rank(Y) == pytest.approx(T / 8, rel=0.15)


def test_cosines_sigma_min_and_rank():
    assert metrics.mean_abs_cos(torch.eye(3, dtype=torch.float64)) == 0
    assert metrics.mean_abs_cos(t([[1, 0], [-2, 0]])) == pytest.approx(1)
    assert metrics.mean_abs_cos(t([[1, 0], [1, 1]])) == pytest.approx(1 / math.sqrt(2))
    assert metrics.sigma_min(t([[3, 0], [0, 4], [0, 0]])) == pytest.approx(3)
    assert metrics.numerical_rank(t([[1, 0], [0, 1e-20]])) == 1
    assert metrics.numerical_rank(t([[1, 0], [0, 1e-20]]), rtol=1e-25) == 2


def test_batched_equals_one_by_one_and_float64_output(gen):
    X = torch.randn(3, 4, 7, 5, generator=gen, dtype=torch.float32)
    batched = metrics.evaluate(X, list(metrics.METRICS))
    for name, value in batched.items():
        assert value.shape == (3, 4)
        assert value.dtype in (torch.float64, torch.int64)
        for i in range(3):
            for j in range(4):
                single = metrics.METRICS[name](X[i, j])
                torch.testing.assert_close(value[i, j], single, rtol=1e-12, atol=0)


def test_mu_in_float64_does_not_cancel_a_float32_input():
    base = torch.full((4, 3), 1e7, dtype=torch.float32)
    X = base.clone()
    X[0, 0] += 1.0  # exactly representable; mean-subtraction in float32 would round
    assert metrics.mu(X) == pytest.approx(math.sqrt(3 / 4))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: metrics.mu(torch.zeros(3)), "X must have at least 2 dims"),
        (lambda: metrics.mean_abs_cos(torch.ones(1, 3)), "at least 2 tokens"),
        (
            lambda: metrics.evaluate(torch.ones(2, 2), ["mu", "rank"]),
            "metric must be one of mu, relative_mu",
        ),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ParameterError, match=match):
        call()


def test_one_minus_cos_is_accurate_where_the_plain_formula_rounds_to_zero():
    angle = 1e-12
    X = t([[1.0, 0.0], [math.cos(angle), math.sin(angle)], [2.0, 0.0]])
    gaps = metrics.one_minus_cos(X)
    # 1 - cos(angle) = angle^2 / 2 to relative 1e-24; the plain formula gives exactly 0
    assert gaps[0, 1].item() == pytest.approx(angle**2 / 2, rel=1e-9, abs=0)
    assert gaps[0, 2].item() == 0 and torch.all(gaps.diagonal() == 0)
    torch.testing.assert_close(gaps, gaps.T, rtol=0, atol=0)
    assert metrics.one_minus_min_cos(X).item() == pytest.approx(angle**2 / 2, rel=1e-9, abs=0)
    unit = X / X.norm(dim=-1, keepdim=True)
    assert (1 - unit[0] @ unit[1]).item() == 0  # what the identity avoids


def test_mu_and_the_cosines_of_unit_tokens_are_tied_by_an_identity_and_two_bounds(gen):
    """For unit rows mu^2 = (N - 1) mean(1 - cos) exactly and 2 g / N <= mu^2 <= (N - 1) g,
    g = 1 - min cos, from tokens spread on the sphere down to tokens 1e-9 apart."""
    N = 6
    for spread in (1.0, 1e-3, 1e-9):
        X = torch.randn(20, N, 4, generator=gen, dtype=torch.float64) * spread
        X = X + torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
        X = X / X.norm(dim=-1, keepdim=True)
        mu2 = metrics.mu(X) ** 2
        torch.testing.assert_close((N - 1) * metrics.mean_one_minus_cos(X), mu2, rtol=1e-6,
                                   atol=0)
        g = metrics.one_minus_min_cos(X)
        assert torch.all(2 * g / N <= mu2) and torch.all(mu2 <= (N - 1) * g)
    with pytest.raises(ParameterError, match="at least 2 tokens"):
        metrics.one_minus_min_cos(torch.ones(1, 3))


def test_res_by_hand():
    """Identity tokens attain the lower constant (res = 1, mu = sqrt(N - 1)); two tokens
    d = x_1 - x_2 give res = sqrt(||d||_inf ||d||_1 / 2) (the midpoint is best for both the
    column and the row sums); identical tokens give 0."""
    assert metrics.res(torch.eye(5, dtype=torch.float64)).item() == pytest.approx(1, abs=1e-9)
    assert metrics.res(t([[1, -2, 0.5], [0, 1, 0.5]])).item() == pytest.approx(
        math.sqrt(3 * 4.0 / 2), abs=1e-9
    )
    assert metrics.res(t([[5, -2], [5, -2]])).item() == 0
    batch = torch.stack([torch.eye(3, dtype=torch.float64), 2 * torch.eye(3, dtype=torch.float64)])
    torch.testing.assert_close(metrics.res(batch), t([1.0, 2.0]), rtol=1e-9, atol=1e-9)


def test_res_is_the_minimum_over_a_fine_grid_in_one_dimension(gen):
    """d = 1: res^2 = min over x of sum_i |r_i - x| * max_i |r_i - x|, searched on a grid."""
    r = torch.randn(7, 1, generator=gen, dtype=torch.float64)
    x = torch.linspace(-4, 4, 400_001, dtype=torch.float64)
    dev = (r - x).abs()  # (token, grid)
    grid = (dev.sum(0) * dev.amax(0)).min().sqrt()
    assert metrics.res(r).item() == pytest.approx(grid.item(), rel=1e-4)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 7), d=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_res_lies_within_its_constants_and_below_the_mean_residual(n, d, seed):
    from collapse import theory

    X = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    value, m = metrics.res(X).item(), metrics.mu(X).item()
    c1, c2 = metrics.res_constants(n, d)
    R = X - X.mean(0)
    assert torch.linalg.matrix_norm(R, ord=2).item() <= value * (1 + 1e-9)
    assert c1 * m <= value * (1 + 1e-9) and value <= theory.dong_residual(X).item() * (1 + 1e-9)
    assert theory.dong_residual(X).item() <= c2 * m * (1 + 1e-12)
    assert metrics.res(3 * X + 7).item() == pytest.approx(3 * value, rel=1e-7)


def test_res_constants_need_two_tokens():
    assert metrics.res_constants(2, 9) == (1.0, math.sqrt(math.sqrt(18)))
    with pytest.raises(ParameterError, match="N must be an int >= 2"):
        metrics.res_constants(1, 3)
