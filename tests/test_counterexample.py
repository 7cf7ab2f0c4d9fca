import math

import numpy as np
import pytest
import torch

from collapse import attention, metrics
from collapse import counterexample as ce
from collapse.checks import ParameterError


@pytest.mark.parametrize("w", [1.5, 2.0, 4.0, 10.0])
def test_both_fixed_points_are_fixed(w):
    token1 = torch.tensor([0.0, 1.0], dtype=torch.float64)
    for point in ce.fixed_points(w):
        X = torch.stack([token1, point])
        assert (ce.step(X, w) - X).abs().max() < 1e-12
        assert torch.linalg.vector_norm(point).item() == pytest.approx(1.0)


def test_fixed_point_mu_values_at_w2():
    """Wu et al. §4.3.1: mu at P- is sqrt(1 + s) = 1.366, at P+ sqrt(1 - s) = 0.366 (w = 2)."""
    token1 = torch.tensor([0.0, 1.0], dtype=torch.float64)
    plus, minus = ce.fixed_points(2.0)
    s = math.sqrt(0.75)
    assert metrics.mu(torch.stack([token1, minus])).item() == pytest.approx(math.sqrt(1 + s))
    assert metrics.mu(torch.stack([token1, plus])).item() == pytest.approx(math.sqrt(1 - s))
    assert math.sqrt(1 + s) == pytest.approx(1.366, abs=1e-3) and math.sqrt(
        1 - s
    ) == pytest.approx(0.366, abs=1e-3)


@pytest.mark.parametrize("x_sign", [1.0, -1.0])
def test_token1_converges_to_the_pole_of_its_sign(x_sign):
    X0 = torch.tensor([[x_sign * 0.8, -0.6], [0.3, 0.4]], dtype=torch.float64)
    final = ce.final_state(X0, 2.0, 3000)
    torch.testing.assert_close(
        final[0], torch.tensor([0.0, x_sign], dtype=torch.float64), rtol=0, atol=1e-3
    )


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
    assert ce.stable_rank_bound(3, 1.5) == pytest.approx(1.421, abs=1e-3)
    assert ce.stable_rank_bound(1, 2.0) == 1.0 and ce.stable_rank_bound(4, 1e6) == pytest.approx(
        1.0
    )


@pytest.mark.parametrize("rank", range(1, 7))
def test_equilibria_of_every_rank(rank):
    X = ce.equilibrium(6, 6.0, rank=rank)
    assert (ce.step(X, 6.0) - X).abs().max() < 1e-12
    assert metrics.numerical_rank(X).item() == rank


def test_iterate_matches_the_explicit_attention_product():
    """The cumulative-mean shortcut must equal A X W_V with A_ij = 1/i for j <= i (1-based)."""
    X0 = ce.random_starts(5, 4, 3, torch.Generator().manual_seed(0))
    W = ce.value_matrix(3, 2.5)
    explicit = X0
    average = torch.tril(torch.ones(4, 4, dtype=torch.float64)) / torch.arange(1, 5)[:, None]
    for _ in range(7):
        explicit = attention.scale_layernorm(average @ explicit @ W)
    torch.testing.assert_close(ce.iterate(X0, W, 7), explicit, rtol=0, atol=1e-14)
    path = ce.iterate(X0, W, 7, keep_path=True)
    assert path.shape == (8, 5, 4, 3)
    torch.testing.assert_close(path[0], X0) and torch.testing.assert_close(
        path[-1], explicit, rtol=0, atol=1e-14
    )


def test_iterate_broadcasts_a_stack_of_value_matrices():
    X0 = ce.angle_grid_states([100.0, 200.0])
    W = torch.stack([ce.value_matrix(2, w) for w in (2.0, 4.0)])[:, None]  # (2, 1, 2, 2)
    out = ce.iterate(X0, W, 50)
    assert out.shape == (2, 2, 2, 2)
    torch.testing.assert_close(out[1], ce.final_state(X0, 4.0, 50))


def test_iterate_restores_the_thread_count():
    before = torch.get_num_threads()
    ce.iterate(torch.eye(2, dtype=torch.float64), ce.value_matrix(2, 2.0), 3)
    assert torch.get_num_threads() == before


def test_normalised_value_matrix_has_unit_norm_and_leaves_ln_dynamics_unchanged():
    """W_V / ||W_V||_2 (A3): bounded products, identical trajectories under scale-only LN."""
    W, Wn = ce.value_matrix(3, 2.0), ce.value_matrix(3, 2.0, normalized=True)
    assert torch.linalg.matrix_norm(Wn, ord=2).item() == pytest.approx(1.0)
    assert torch.linalg.matrix_norm(torch.linalg.matrix_power(Wn, 50), ord=2) <= 1.0
    assert torch.linalg.matrix_norm(torch.linalg.matrix_power(W, 50), ord=2) > 100
    X0 = ce.random_starts(20, 3, 3, torch.Generator().manual_seed(1))
    assert (ce.iterate(X0, W, 200) - ce.iterate(X0, Wn, 200)).abs().max() < 1e-13
    assert (
        ce.iterate(X0, W, 5, layernorm=False) - ce.iterate(X0, Wn, 5, layernorm=False)
    ).abs().max() > 1e-3


def test_no_layernorm_bound_values():
    torch.testing.assert_close(
        ce.no_layernorm_bound([0, 1, 3], 2.0), torch.tensor([1.0, 1.5, 7 / 8], dtype=torch.float64)
    )


def test_angle_pair_states_grid():
    S = ce.angle_pair_states([0.0, 90.0], [180.0, 270.0, 0.0])
    assert S.shape == (2, 3, 2, 2)
    torch.testing.assert_close(
        S[1, 1], torch.tensor([[0.0, 1.0], [0.0, -1.0]], dtype=torch.float64), rtol=0, atol=1e-15
    )
    torch.testing.assert_close(
        S[0, 0], torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64), rtol=0, atol=1e-15
    )


def test_random_starts_are_seeded_unit_rows():
    a = ce.random_starts(100, 3, 4, torch.Generator().manual_seed(7))
    b = ce.random_starts(100, 3, 4, torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and a.shape == (100, 3, 4)
    torch.testing.assert_close(a.norm(dim=-1), torch.ones(100, 3, dtype=torch.float64))
    angles = torch.rad2deg(torch.atan2(a[..., 1], a[..., 0]))
    assert (angles > 0).double().mean().item() == pytest.approx(0.5, abs=0.1)


def test_limit_labels_on_known_states_and_the_mirror():
    plus, minus = ce.fixed_points(2.0)
    pole = torch.tensor([0.0, 1.0], dtype=torch.float64)
    states = torch.stack(
        [
            torch.stack([pole, pole]),
            torch.stack([pole, minus]),
            torch.stack([pole, plus]),
            -torch.stack([pole, minus]),  # the odd symmetry X -> -X
            torch.stack([pole, torch.tensor([1.0, 0.0], dtype=torch.float64)]),
            torch.stack([torch.tensor([0.6, 0.8], dtype=torch.float64), pole]),
            torch.full((2, 2), math.nan, dtype=torch.float64),
        ]
    )
    assert ce.limit_labels(states, 2.0).tolist() == [0, 1, 2, 1, -1, -1, -1]


def test_limit_labels_of_the_pinned_basin_match_the_predicted_arc():
    theta = np.array([100.0, 130.0, 200.0, 265.0, 275.0, 350.0])
    labels = ce.limit_labels(ce.final_state(ce.angle_grid_states(theta), 2.0, 2000), 2.0)
    assert labels.tolist() == [0, 1, 1, 1, 0, 0]


def test_tangent_basis_is_orthonormal_and_orthogonal_to_tokens():
    X = ce.equilibrium(4, 2.0)
    B = ce.tangent_basis(X)
    assert B.shape == (4, 4, 3)
    torch.testing.assert_close(
        B.transpose(-1, -2) @ B,
        torch.eye(3, dtype=torch.float64).expand(4, 3, 3),
        rtol=0,
        atol=1e-14,
    )
    assert (X[:, None, :] @ B).abs().max() < 1e-14


def test_stability_modes_of_the_2d_fixed_points():
    """With token 1 at the pole: P- has eigenvalues {1 - s, 1}, P+ has {1, 1 + s} (s = sqrt(1 -
    1/w^2))."""
    w = 2.0
    s = math.sqrt(1 - 1 / w**2)
    pole = torch.tensor([0.0, 1.0], dtype=torch.float64)
    plus, minus = ce.fixed_points(w)
    for point, expected in ((minus, [1 - s, 1.0]), (plus, [1.0, 1 + s])):
        values, directions = ce.stability_modes(torch.stack([pole, point]), w)
        torch.testing.assert_close(
            values.real, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
        )
        assert values.imag.abs().max() < 1e-12
        torch.testing.assert_close(
            directions.flatten(1).norm(dim=1), torch.ones(2, dtype=torch.float64)
        )


def test_stability_modes_predict_the_fate_of_perturbations():
    """Directions with |lambda| < 1 return, those with |lambda| > 1 leave (N = 3, w = 2, default
    signs).

    Over a short horizon only: rounding errors seed the unstable mode, which takes over
    every perturbation after ~40 steps (the equilibrium is a saddle).
    """
    X = ce.equilibrium(3, 2.0)
    values, directions = ce.stability_modes(X, 2.0)
    moduli = values.abs()
    assert (moduli > 1 + 1e-6).sum() == 1 and (moduli < 1 - 1e-6).sum() == 2
    eps = 1e-8
    dist = ce.perturb_and_iterate(X, 2.0, directions, eps, 15)
    assert dist.shape == (16, 6)
    assert (dist[0] - eps).abs().max() < 1e-3 * eps
    assert (dist[-1, moduli < 1 - 1e-6] < 1e-2 * eps).all()
    assert (dist[-1, moduli > 1 + 1e-6] > 1e2 * eps).all()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ce.fixed_points(1.0), "w must be a number > 1"),
        (lambda: ce.value_matrix(2, "2"), "w must be a number > 0"),
        (lambda: ce.equilibrium(3, 2.0, signs=[1]), "signs must be 2 values, each"),
        (lambda: ce.equilibrium(3, 2.0, rank=4), r"rank must be an int in \[1, N=3\]"),
        (lambda: ce.equilibrium(6, 2.0, rank=2), "w=2.0 is too small"),
        (lambda: ce.trajectory(torch.zeros(2, 2), 2.0, -1), "steps must be an int >= 0"),
        (lambda: ce.iterate(torch.zeros(2, 3), torch.eye(2), 1), "W_V must be 3 x 3"),
        (
            lambda: ce.perturb_and_iterate(torch.eye(2), 2.0, torch.zeros(1, 3, 2), 1e-3, 5),
            r"directions must have shape \(M, 2, 2\)",
        ),
        (lambda: ce.limit_labels(torch.eye(2), 2.0, atol=0.0), "atol must be a number > 0"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ParameterError, match=match):
        call()


def test_random_orthogonal_is_orthogonal_and_seeded():
    Z = ce.random_orthogonal(2, seed=3)
    torch.testing.assert_close(Z @ Z.T, torch.eye(2, dtype=torch.float64))
    torch.testing.assert_close(Z, ce.random_orthogonal(2, seed=3), rtol=0, atol=0)
    assert not torch.equal(Z, ce.random_orthogonal(2, seed=4))


def test_rotated_construction_follows_the_rotated_trajectory():
    """The reply to Q2: W_Z = Z^T W Z from X0 Z runs along X(t) Z; a matrix that is not
    orthogonal, or a wrong W_Z, would not."""
    X0 = ce.angle_grid_states(np.arange(5.0, 360.0, 30.0))
    W = torch.stack([ce.value_matrix(2, w) for w in (2.0, 4.0)])[:, None]  # (w, 1, 2, 2)
    Z = torch.stack([ce.random_orthogonal(2, s) for s in range(3)])[:, None, None]
    gap = ce.rotation_gap(X0, W, Z, 300)
    assert gap.shape == (3, 2, len(X0))
    assert gap.max() < 1e-13
    assert ce.rotation_gap(X0, W, torch.eye(2, dtype=torch.float64), 300).max() == 0
    shear = torch.tensor([[1.0, 0.3], [0.0, 1.0]], dtype=torch.float64)  # not orthogonal
    assert ce.rotation_gap(X0, W, shear, 300).max() > 1e-3
