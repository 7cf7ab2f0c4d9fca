import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from collapse import attention, markov, masks
from collapse.checks import ParameterError


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 2**31 - 1), scale=st.floats(1e-3, 50.0))
def test_masked_softmax_rows_sum_to_one_and_forbidden_entries_are_zero(n, seed, scale):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(n, n, generator=g) < 0.3) | torch.eye(n, dtype=torch.bool)
    S = torch.randn(3, n, n, generator=g, dtype=torch.float64) * scale
    A = attention.masked_softmax(S, mask)
    assert torch.all(A[:, ~mask] == 0)  # exactly zero, not merely small
    assert torch.all(A[:, mask] > 0)
    torch.testing.assert_close(
        A.sum(-1), torch.ones(3, n, dtype=torch.float64), rtol=0, atol=1e-12
    )


def test_masked_softmax_matches_renormalised_exponentials():
    S = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, -1.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    mask = masks.make("causal", 3)
    A = attention.masked_softmax(S, mask)
    expected = torch.tensor(
        [
            [1.0, 0, 0],
            [math.e**3 / (math.e**3 + 1), 1 / (math.e**3 + 1), 0],
            [1 / 3, 1 / 3, 1 / 3],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(A, expected, rtol=0, atol=1e-15)


def test_temperature_scales_scores_and_flattens_attention(gen):
    X = torch.randn(8, 4, generator=gen, dtype=torch.float64)
    W_Q, W_K = (torch.randn(4, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    torch.testing.assert_close(attention.scores(X @ W_Q, X @ W_K, 4.0), X @ W_Q @ (X @ W_K).T / 2)
    torch.testing.assert_close(
        attention.scores(X @ W_Q, X @ W_K), X @ W_Q @ (X @ W_K).T / 2
    )  # default d_qk = 4

    def entropy(d_qk):
        A = attention.attention_matrix(X, W_Q, W_K, d_qk=d_qk)
        return -(A * A.log()).sum(-1).mean()

    entropies = [entropy(d) for d in (1 / 64, 1.0, 64.0)]
    assert entropies[0] < entropies[1] < entropies[2] < math.log(8)


def test_temperature_tensor_broadcasts_over_batch(gen):
    Q = torch.randn(3, 5, 4, generator=gen, dtype=torch.float64)
    K = torch.randn(3, 5, 4, generator=gen, dtype=torch.float64)
    d_qk = torch.tensor([0.5, 1.0, 9.0])
    batched = attention.scores(Q, K, d_qk)
    for i in range(3):
        torch.testing.assert_close(batched[i], attention.scores(Q[i], K[i], float(d_qk[i])))


def test_scale_layernorm_gives_unit_tokens(gen):
    X = torch.randn(2, 6, 5, generator=gen, dtype=torch.float64) * 7
    torch.testing.assert_close(
        torch.linalg.vector_norm(attention.scale_layernorm(X), dim=-1),
        torch.ones(2, 6, dtype=torch.float64),
    )
    # No centring: the direction of each token is kept.
    torch.testing.assert_close(
        attention.scale_layernorm(X) * torch.linalg.vector_norm(X, dim=-1, keepdim=True), X
    )


def test_centered_layernorm_formula(gen):
    X = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    weight, bias = (
        torch.randn(6, generator=gen, dtype=torch.float64),
        torch.randn(6, generator=gen, dtype=torch.float64),
    )
    centred = X - X.mean(-1, keepdim=True)
    expected = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-5) * weight + bias
    torch.testing.assert_close(attention.centered_layernorm(X, 1e-5, weight, bias), expected)


def test_outlier_removal_deflates_eigenvalue_one(gen):
    A = markov.random_markov(30, generator=gen)
    A_perp = attention.remove_outlier(A)
    assert A_perp.sum(-1).abs().max() < 1e-12
    before, after = torch.linalg.eigvals(A), torch.linalg.eigvals(A_perp)
    top = before.abs().argmax()
    assert abs(before[top] - 1) < 1e-12
    assert after.abs().min() < 1e-12
    # Every other eigenvalue of A is kept (Brauer's theorem).
    for i, lam in enumerate(before):
        if i != top:
            assert (after - lam).abs().min() < 1e-8


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: attention.masked_softmax(
                torch.zeros(3, 3), torch.zeros(3, 3, dtype=torch.bool)
            ),
            "mask row 0 allows no token",
        ),
        (
            lambda: attention.masked_softmax(torch.zeros(3, 3), masks.make("causal", 4)),
            "does not match scores shape",
        ),
        (
            lambda: attention.masked_softmax(torch.zeros(3), None),
            "scores must have at least 2 dims",
        ),
        (
            lambda: attention.masked_softmax(torch.zeros(3, 3), torch.ones(3, 3)),
            "mask must be a torch.bool tensor",
        ),
        (
            lambda: attention.scores(torch.zeros(3, 2), torch.zeros(3, 2), 0.0),
            "d_qk must be a number > 0",
        ),
        (
            lambda: attention.scores(torch.zeros(3, 2), torch.zeros(3, 2), "big"),
            "d_qk must be a number > 0",
        ),
        (
            lambda: attention.attention_matrix(
                torch.zeros(3, 2), torch.zeros(3, 3), torch.zeros(3, 3)
            ),
            "W_Q and W_K must have 2 rows",
        ),
        (lambda: attention.remove_outlier(torch.zeros(3, 4)), "A must be square"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ParameterError, match=match):
        call()
