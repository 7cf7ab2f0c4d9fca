import math

import numpy as np
import pytest
import torch

from collapse import markov
from collapse.checks import ParameterError


def test_random_markov_is_row_stochastic_and_seeded():
    A = markov.random_markov(50, generator=torch.Generator().manual_seed(0), batch=(2, 3))
    assert A.shape == (2, 3, 50, 50) and A.dtype == torch.float64
    assert torch.all(A > 0)
    assert (A.sum(-1) - 1).abs().max() < 1e-14
    again = markov.random_markov(50, generator=torch.Generator().manual_seed(0), batch=(2, 3))
    assert torch.equal(A, again)
    single = markov.random_markov(
        50, generator=torch.Generator().manual_seed(0), dtype=torch.float32
    )
    assert single.dtype == torch.float32


def test_entries_are_normalised_lognormals_with_mean_and_variance_one():
    """Row sums of E are ~T, so T * A_ij ~ E_ij: mean 1, variance 1 (to sampling error)."""
    A = markov.random_markov(2000, generator=torch.Generator().manual_seed(1))
    scaled = 2000 * A
    assert scaled.mean().item() == pytest.approx(1.0, abs=1e-12)
    assert scaled.var().item() == pytest.approx(1.0, abs=0.05)


def test_spectrum_top_eigenvalue_and_gap():
    T = 400
    A = markov.random_markov(T, generator=torch.Generator().manual_seed(2))
    eigenvalues = torch.linalg.eigvals(A)
    top = eigenvalues.abs().argmax()
    assert abs(eigenvalues[top].item() - 1) < 1e-10
    s = torch.linalg.svdvals(A)
    assert abs(s[0].item() - 1) <= 0.01
    bulk = math.sqrt(T) * s[1:].numpy()
    assert markov.ks_distance(bulk) <= 0.05
    assert np.mean(bulk**2) == pytest.approx(1.0, rel=0.05)  # second moment of the law
    assert bulk[0] == pytest.approx(2.0, rel=0.15)
    others = np.delete(eigenvalues.abs().numpy(), top.item())
    assert others.max() == pytest.approx(1 / math.sqrt(T), rel=0.2)


def test_quarter_circle_law_is_a_distribution():
    x = np.linspace(0, 2, 200001)
    assert np.trapezoid(markov.quarter_circle_pdf(x), x) == pytest.approx(1.0, abs=1e-6)
    assert np.trapezoid(x**2 * markov.quarter_circle_pdf(x), x) == pytest.approx(1.0, abs=1e-6)
    assert markov.quarter_circle_cdf(0.0) == 0 and markov.quarter_circle_cdf(2.0) == pytest.approx(
        1.0
    )
    assert markov.quarter_circle_cdf(-1.0) == 0 and markov.quarter_circle_cdf(
        3.0
    ) == pytest.approx(1.0)
    assert markov.quarter_circle_pdf(2.5) == 0 and markov.quarter_circle_pdf(-0.1) == 0
    mid = np.linspace(0.1, 1.9, 50)
    derivative = (
        markov.quarter_circle_cdf(mid + 1e-6) - markov.quarter_circle_cdf(mid - 1e-6)
    ) / 2e-6
    np.testing.assert_allclose(derivative, markov.quarter_circle_pdf(mid), rtol=1e-6)


def test_ks_distance_tells_the_law_from_others():
    rng = np.random.default_rng(0)
    grid = np.linspace(0, 2, 100001)
    law_samples = np.interp(rng.random(20000), markov.quarter_circle_cdf(grid), grid)
    assert markov.ks_distance(law_samples) < 0.015
    assert markov.ks_distance(rng.uniform(0, 2, 20000)) > 0.1


def _markov(T, seed, batch=()):
    return markov.random_markov(T, generator=torch.Generator().manual_seed(seed), batch=batch)


def test_eigenvalues_sorted_by_modulus_and_second_moment():
    A = _markov(300, 10)
    values = markov.eigenvalues(A)
    assert values.dtype == torch.complex128 and values.shape == (300,)
    assert abs(values[0] - 1) < 1e-12
    assert torch.all(values.abs()[:-1] >= values.abs()[1:])
    assert markov.second_moment([1.0, 3.0]) == 5.0


def test_matched_distance_matches_multisets_not_orders():
    rng = np.random.default_rng(11)
    values = rng.normal(size=50) + 1j * rng.normal(size=50)
    assert markov.matched_distance(values, rng.permutation(values)) == 0.0
    moved = values.copy()
    moved[7] += 1e-3
    assert markov.matched_distance(values, rng.permutation(moved)) == pytest.approx(1e-3, rel=1e-9)
    batch = np.stack([values, values])
    assert markov.matched_distance(batch, np.stack([values, moved])) == pytest.approx(
        1e-3, rel=1e-9
    )


def test_deflation_of_a_markov_matrix_replaces_eigenvalue_one_by_zero():
    """The fix on one matrix: A - 11^T/T has A's eigenvalues with 1 replaced by 0."""
    from collapse.attention import remove_outlier

    A = _markov(200, 12)
    before, after = markov.eigenvalues(A).numpy(), markov.eigenvalues(remove_outlier(A)).numpy()
    assert (
        markov.matched_distance(before, after) > 0.9
    )  # nothing in the deflated spectrum is near 1
    before[0] = 0
    assert markov.matched_distance(before, after) < 1e-12


def test_logit_std_recovers_the_logit_spread():
    g = torch.Generator().manual_seed(13)
    S = 0.3 * torch.randn(4, 100, 100, generator=g, dtype=torch.float64)
    expected = (S - S.mean(-1, keepdim=True)).flatten(-2).std(-1)
    torch.testing.assert_close(markov.logit_std(torch.softmax(S, -1)), expected)
    assert markov.logit_std(torch.full((5, 5), 0.2)).item() == pytest.approx(0.0, abs=1e-12)
    assert markov.logit_std(_markov(400, 14)).item() == pytest.approx(
        math.sqrt(math.log(2)), rel=0.02
    )  # G ~ N(., ln 2)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: markov.random_markov(0), "T must be an int >= 1"),
        (lambda: markov.random_markov(3.5), "T must be an int >= 1"),
        (
            lambda: markov.top_singular_values(torch.eye(4), 5),
            r"k must be at most min\(rows, cols\) = 4",
        ),
        (
            lambda: markov.top_singular_values(torch.eye(4), 4, method="iterative"),
            "method 'iterative' needs k < min",
        ),
        (
            lambda: markov.top_singular_values(torch.eye(4), 2, method="arnoldi"),
            "method must be one of auto, full, iterative, lanczos",
        ),
        (
            lambda: markov.lanczos_singular_values(torch.eye(4), 5),
            r"k must be at most min\(rows, cols\) = 4",
        ),
        (
            lambda: markov.lanczos_singular_values(torch.eye(4), 1, tol=0.0),
            "tol must be a number > 0",
        ),
        (
            lambda: markov.lanczos_singular_values(torch.eye(4), 1, block=0),
            "block must be an int >= 1",
        ),
        (
            lambda: markov.lanczos_singular_values(torch.eye(4), 1, precision="single"),
            "precision must be one of mixed, double",
        ),
        (
            lambda: markov.lanczos_singular_values(torch.eye(40), 6, max_dim=4),
            r"max_dim must be at least k \+ block = 7",
        ),
        (lambda: markov.eigenvalues(torch.ones(3, 4)), "A must be square"),
        (lambda: markov.second_moment([]), "samples must not be empty"),
        (
            lambda: markov.matched_distance([1.0, 2.0], [1.0]),
            "a and b must be non-empty with the same shape",
        ),
        (lambda: markov.ks_distance([]), "samples must not be empty"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ParameterError, match=match):
        call()
