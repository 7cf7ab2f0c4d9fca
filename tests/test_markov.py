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
    single = markov.random_markov(50, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
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
    assert markov.quarter_circle_cdf(0.0) == 0 and markov.quarter_circle_cdf(2.0) == pytest.approx(1.0)
    assert markov.quarter_circle_cdf(-1.0) == 0 and markov.quarter_circle_cdf(3.0) == pytest.approx(1.0)
    assert markov.quarter_circle_pdf(2.5) == 0 and markov.quarter_circle_pdf(-0.1) == 0
    mid = np.linspace(0.1, 1.9, 50)
    derivative = (markov.quarter_circle_cdf(mid + 1e-6) - markov.quarter_circle_cdf(mid - 1e-6)) / 2e-6
    np.testing.assert_allclose(derivative, markov.quarter_circle_pdf(mid), rtol=1e-6)


def test_ks_distance_tells_the_law_from_others():
    rng = np.random.default_rng(0)
    grid = np.linspace(0, 2, 100001)
    law_samples = np.interp(rng.random(20000), markov.quarter_circle_cdf(grid), grid)
    assert markov.ks_distance(law_samples) < 0.015
    assert markov.ks_distance(rng.uniform(0, 2, 20000)) > 0.1


@pytest.mark.parametrize("shape, k", [((700, 700), 6), ((2, 600, 650), 3)])
def test_iterative_top_singular_values_agree_with_full_svd(shape, k):
    g = torch.Generator().manual_seed(3)
    A = torch.randn(*shape, generator=g, dtype=torch.float64)
    full = markov.top_singular_values(A, k, method="full")
    iterative = markov.top_singular_values(A, k, method="iterative")
    assert iterative.shape == full.shape == (*shape[:-2], k)
    torch.testing.assert_close(iterative, full, rtol=0, atol=1e-8)


def test_iterative_on_markov_resolves_the_outlier_and_the_bulk_edge():
    A = markov.random_markov(800, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(markov.top_singular_values(A, 4), torch.linalg.svdvals(A)[:4], rtol=0, atol=1e-8)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: markov.random_markov(0), "T must be an int >= 1"),
        (lambda: markov.random_markov(3.5), "T must be an int >= 1"),
        (lambda: markov.top_singular_values(torch.eye(4), 5), r"k must be at most min\(rows, cols\) = 4"),
        (lambda: markov.top_singular_values(torch.eye(4), 4, method="iterative"), "method 'iterative' needs k < min"),
        (lambda: markov.top_singular_values(torch.eye(4), 2, method="lanczos"), "method must be one of auto, full, iterative"),
        (lambda: markov.ks_distance([]), "samples must not be empty"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ParameterError, match=match):
        call()
