"""The library pieces chapter 06 (Theorem 3's equilibria) calls: the sign patterns, the table
of every equilibrium of one size, the rank family, the stability probe and the power norms."""

import math

import pytest
import torch

from collapse import counterexample as ce
from collapse import tables


def test_sign_patterns_list_every_branch_once_the_papers_first():
    patterns = ce.sign_patterns(4)
    assert len(patterns) == 8 and len({tuple(s) for s in patterns}) == 8
    assert patterns[0] == [-1, -1, -1]
    assert ce.sign_patterns(1) == [[]]


def test_residual_is_zero_at_an_equilibrium_and_not_elsewhere():
    X = ce.equilibrium(3, 2.0, [1, -1])
    assert ce.residual(X, 2.0) < 1e-15
    assert ce.residual(torch.flip(X, [0]), 2.0) > 0.1


def test_conditioning_is_sigma_min_over_sigma_max_per_matrix():
    X = torch.stack([torch.diag(torch.tensor([4.0, 1.0])), torch.eye(2)]).double()
    assert ce.conditioning(X).tolist() == [0.25, 1.0]
    # the paper's branch at N = 4: sigma_N <= w^-(N-1) (the last token's first coordinate)
    assert float(ce.conditioning(ce.equilibrium(4, 8.0))) < 8.0**-3


@pytest.mark.parametrize("N, w", [(2, 2.0), (3, 1.5), (3, 4.0)])
def test_equilibria_summary_counts_every_sign_choice(N, w):
    row = ce.equilibria_summary(N, w)
    assert row["equilibria"] == 2 ** (N - 1)
    assert row["max residual"] < 1e-12 and row["min numerical rank"] == N
    assert row["max sr"] <= row["sr bound"] * (1 + 1e-12)
    eps = torch.finfo(torch.float64).eps
    assert math.isclose(row["σ_N/(N·eps·σ_1)"], row["min σ_N/σ_1"] / (N * eps))
    assert row["paper's branch: min |λ|"] < 1 <= row["paper's branch: max |λ|"] + 1e-9


def test_equilibria_summary_at_n2_is_the_counterexample():
    """P- (the paper's branch) attracts along token 2 with 1 - s; P+ leaves with 1 + s."""
    row, s = ce.equilibria_summary(2, 2.0), math.sqrt(1 - 1 / 4)
    assert row["with |λ| > 1"] == 1 and row["with |λ| < 1"] == 1
    assert math.isclose(row["paper's branch: min |λ|"], 1 - s, rel_tol=1e-9)


def test_rank_family_has_every_rank_exactly():
    family = ce.rank_family(5, 5.0)
    assert family.index.tolist() == [1, 2, 3, 4, 5] and family.index.name == "rank k"
    assert family["numerical rank"].tolist() == [1, 2, 3, 4, 5]
    assert (family["residual"] < 1e-12).all() and (family["σ_k/σ_1"] > 1e-6).all()


def test_stability_probe_follows_both_signs_of_every_direction():
    probe = ce.stability_probe(3, 2.0, 1e-3, 4)
    assert list(probe) == [tuple(s) for s in ce.sign_patterns(3)]
    moduli, distances = probe[(-1, -1)]
    assert moduli.shape == (12,) and distances.shape == (5, 12)
    assert torch.equal(moduli[:6], moduli[6:])
    assert torch.allclose(distances[0], torch.full((12,), 1e-3, dtype=torch.float64), rtol=1e-3)


def test_power_norms_grow_for_the_shear_and_not_once_normalised():
    W = ce.value_matrix(2, 2.0)
    assert ce.power_norms(W, [1, 1000])[1] > 1000
    normalised = ce.value_matrix(2, 2.0, normalized=True)
    assert max(ce.power_norms(normalised, [1, 10, 1000])) <= 1 + 1e-12


def test_sign_tuple_writes_signs_as_math():
    assert tables.sign_tuple((-1, 1, 1)) == "$(-1, +1, +1)$"
