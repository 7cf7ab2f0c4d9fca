import math

import numpy as np
import pytest
import torch

from collapse import counterexample as ce
from collapse import metrics
from collapse.checks import ParameterError


@pytest.mark.parametrize("w", [1.5, 2.0, 4.0, 10.0])
def test_both_fixed_points_are_fixed(w):
    token1 = torch.tensor([0.0, 1.0], dtype=torch.float64)
    for point in ce.fixed_points(w):
        X = torch.stack([token1, point])
        assert (ce.step(X, w) - X).abs().max() < 1e-12
        assert torch.linalg.vector_norm(point).item() == pytest.approx(1.0)


def test_fixed_point_mu_values_at_w2():
    """PAPERS W3: mu at P- is sqrt(1 + s) = 1.366, at P+ sqrt(1 - s) = 0.366 (w = 2)."""
    token1 = torch.tensor([0.0, 1.0], dtype=torch.float64)
    plus, minus = ce.fixed_points(2.0)
    s = math.sqrt(0.75)
    assert metrics.mu(torch.stack([token1, minus])).item() == pytest.approx(math.sqrt(1 + s))
    assert metrics.mu(torch.stack([token1, plus])).item() == pytest.approx(math.sqrt(1 - s))
    assert math.sqrt(1 + s) == pytest.approx(1.366, abs=1e-3) and math.sqrt(1 - s) == pytest.approx(0.366, abs=1e-3)


@pytest.mark.parametrize("x_sign", [1.0, -1.0])
def test_token1_converges_to_the_pole_of_its_sign(x_sign):
    X0 = torch.tensor([[x_sign * 0.8, -0.6], [0.3, 0.4]], dtype=torch.float64)
    final = ce.final_state(X0, 2.0, 3000)
    torch.testing.assert_close(final[0], torch.tensor([0.0, x_sign], dtype=torch.float64), rtol=0, atol=1e-3)


@pytest.mark.parametrize("w", [2.0, 4.0, 10.0])
def test_basin_of_the_non_collapsed_fixed_point(w):
    theta = np.arange(0.0, 360.0, 2.0)
    final = ce.final_state(ce.angle_grid_states(theta), w, 2000)[:, 1]
    _, minus = ce.fixed_points(w)
    lo, hi = ce.basin(w)
    reaches_minus = (final - minus).norm(dim=-1) < 1e-6
    collapses = (final - torch.tensor([0.0, 1.0], dtype=torch.float64)).norm(dim=-1) < 1e-2
    clear = (np.abs(theta - lo) > 1) & (np.abs(theta - hi) > 1)
    inside = (theta > lo) & (theta < hi)
    assert reaches_minus.numpy()[clear & inside].all()
    assert collapses.numpy()[clear & ~inside].all()
    assert (hi - lo) / 360 == pytest.approx((90 + math.degrees(math.acos(1 / w))) / 360)


def test_basin_fraction_at_w2():
    lo, hi = ce.basin(2.0)
    assert lo == pytest.approx(120.0) and (hi - lo) / 360 == pytest.approx(0.417, abs=1e-3)


def test_without_layernorm_tokens_collapse_within_the_bound():
    X0 = torch.tensor([[0.6, 0.8], [-0.9, 0.2]], dtype=torch.float64)
    w = 2.0
    path = ce.trajectory(X0, w, 40, layernorm=False)
    mus = metrics.mu(path)
    t = torch.arange(41, dtype=torch.float64)
    assert mus[-1] < 1e-9
    assert torch.all(mus <= 2.0**-t * (1 + t * w) * mus[0] * (1 + 1e-12))


@pytest.mark.parametrize("N", [3, 4, 6])
@pytest.mark.parametrize("w", [1.5, 2.0, 4.0])
def test_theorem3_equilibria(N, w):
    rng = np.random.default_rng(N)
    for signs in (None, list(rng.choice([-1, 1], size=N - 1))):
        X = ce.equilibrium(N, w, signs)
        assert (ce.step(X, w) - X).abs().max() < 1e-12
        s = torch.linalg.svdvals(X)
        assert s[-1] / s[0] > 1e-6
        assert metrics.stable_rank(X).item() <= N / (N - (N - 1) / w**2) + 1e-12


def test_stable_rank_value_from_papers():
    assert metrics.stable_rank(ce.equilibrium(3, 1.5)).item() == pytest.approx(1.381, abs=1e-3)


@pytest.mark.parametrize("rank", range(1, 7))
def test_equilibria_of_every_rank(rank):
    X = ce.equilibrium(6, 6.0, rank=rank)
    assert (ce.step(X, 6.0) - X).abs().max() < 1e-12
    assert metrics.numerical_rank(X).item() == rank


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ce.fixed_points(1.0), "w must be a number > 1"),
        (lambda: ce.value_matrix(2, "2"), "w must be a number > 0"),
        (lambda: ce.equilibrium(3, 2.0, signs=[1]), "signs must be 2 values, each"),
        (lambda: ce.equilibrium(3, 2.0, rank=4), r"rank must be an int in \[1, N=3\]"),
        (lambda: ce.equilibrium(6, 2.0, rank=2), "w=2.0 is too small"),
        (lambda: ce.trajectory(torch.zeros(2, 2), 2.0, -1), "steps must be an int >= 0"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ParameterError, match=match):
        call()
