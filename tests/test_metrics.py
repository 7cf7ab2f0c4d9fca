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
