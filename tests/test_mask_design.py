"""The mask-design catalogue, its graph summary, radius growth and the collapse measurements."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from collapse import fit, mask_design, masks, metrics, san
from collapse.checks import ParameterError


@pytest.mark.parametrize("name", list(mask_design.CATALOGUE))
def test_every_pattern_builds_masks_with_self_loops(name):
    period = mask_design.build(name, 64)
    assert len(period) == mask_design.CATALOGUE[name].period
    for m in period:
        assert m.shape == (64, 64) and m.dtype == torch.bool and m.diagonal().all()


def test_swin_shifted_alternates_the_two_masks():
    first, second = mask_design.build("swin_shifted", 64)
    assert torch.equal(first, masks.make("swin_2d", 64, window=4))
    assert torch.equal(second, masks.make("swin_2d", 64, window=4, shift=True))


def test_unknown_pattern_is_refused():
    with pytest.raises(ParameterError, match="pattern must be one of"):
        mask_design.build("nope", 16)


def test_stack_repeats_each_pattern_to_the_common_period():
    a = masks.make("causal", 16)
    b0, b1 = masks.make("swin_2d", 16, window=2), masks.make("swin_2d", 16, window=2, shift=True)
    layers = mask_design.stack([(a,), (b0, b1)])
    assert len(layers) == 2 and layers[0].shape == (2, 16, 16)
    assert torch.equal(layers[0][0], a) and torch.equal(layers[1][0], a)
    assert torch.equal(layers[0][1], b0) and torch.equal(layers[1][1], b1)


@pytest.mark.parametrize(
    "mask",
    [
        masks.make("complete", 12),
        masks.make("causal", 12),
        masks.make("sliding_window", 12),
        masks.make("dilated_sliding_window", 12),
        masks.make("strided", 16),
        masks.make("bigbird", 20, window=1, n_global=1, n_random=2),
        [masks.make("swin_2d", 36, window=2), masks.make("swin_2d", 36, window=2, shift=True)],
    ],
    ids=["complete", "causal", "window", "dilated", "strided", "bigbird", "swin"],
)
def test_graph_summary_agrees_with_the_masks_functions(mask):
    summary = mask_design.graph_summary(mask)
    assert summary["radius"] == masks.radius(mask)
    assert summary["diameter"] == masks.diameter(mask)
    assert summary["centers"] == len(masks.centers(mask))
    assert summary["strongly_connected"] == masks.is_strongly_connected(mask)
    assert summary["quasi_strongly_connected"] == masks.is_quasi_strongly_connected(mask)
    assert summary["radius_layers"] == mask_design.radius_in_layers(mask)
    if not isinstance(mask, list):  # one mask: the radius in layers is its radius
        assert summary["radius_layers"] == summary["radius"]


def _layers_to_reach_all(sequence, phase):
    """Brute force: apply the masks from `phase` on, one layer at a time, until one token
    has reached every token (Python sets, no matrix products)."""
    n, p = sequence[0].shape[0], len(sequence)
    keys = [[set(np.flatnonzero(row)) for row in m.numpy()] for m in sequence]  # i sees k
    reached = [{j} for j in range(n)]  # reached[j]: the tokens j has reached
    for layers in range(1, 4 * n * p):
        sees = keys[(phase + layers - 1) % p]
        reached = [{i for i in range(n) if sees[i] & r} for r in reached]
        if any(len(r) == n for r in reached):
            return layers
    return math.inf


def test_radius_in_layers_counts_layers_not_periods():
    """Two layers on three tokens: layer 1 lets token 1 see token 0, layer 2 lets token 2 see
    token 1. From layer 1 on, token 0 reaches everyone in 2 layers (one period); from layer 2
    on, it takes 3 (layer 2 is wasted), so every 3 consecutive layers have a center."""
    first, second = torch.eye(3, dtype=torch.bool), torch.eye(3, dtype=torch.bool)
    first[1, 0], second[2, 1] = True, True
    assert masks.radius([first, second]) == 1  # one period
    assert [_layers_to_reach_all([first, second], phase) for phase in (0, 1)] == [2, 3]
    assert mask_design.radius_in_layers([first, second]) == 3


@pytest.mark.parametrize("n", [16, 64, 144, 256])
def test_radius_in_layers_of_swin_is_the_slowest_phase(n):
    window = 2 if n == 16 else 4
    period = [masks.make("swin_2d", n, window=window),
              masks.make("swin_2d", n, window=window, shift=True)]  # fmt: skip
    phases = [_layers_to_reach_all(period, phase) for phase in (0, 1)]
    assert mask_design.radius_in_layers(period) == max(phases)
    assert mask_design.graph_summary(period)["radius_layers"] == max(phases)


def test_swin_radius_in_layers_at_256_tokens_is_five_not_six():
    period = list(mask_design.build("swin_shifted", 256))
    summary = mask_design.graph_summary(period)
    assert summary["radius"] == 3  # periods of two layers
    assert summary["radius_layers"] == 5  # not 3 x 2: the last period needs one layer


def test_radius_in_layers_of_one_mask_and_without_a_center():
    assert mask_design.radius_in_layers(masks.make("sliding_window", 12)) == 6
    swin = [masks.make("swin_2d", 16, window=2)] * 2
    assert mask_design.radius_in_layers(swin) == math.inf


def test_hand_counted_radii():
    """Sink window on 6 tokens: token 0 sees itself; every token sees token 0, so r = 1.
    Swin, 4 x 4 grid, 2 x 2 blocks, unshifted: 4 blocks that never mix, no center."""
    sink = masks.make("sink_window", 6, window=1, n_sink=1)
    assert mask_design.graph_summary(sink)["radius"] == 1
    assert mask_design.graph_summary(sink)["centers"] == 1
    swin = mask_design.graph_summary(masks.make("swin_2d", 16, window=2))
    assert swin["radius"] == math.inf and swin["centers"] == 0
    assert sorted(np.bincount(mask_design.components(masks.make("swin_2d", 16, window=2)))) == [
        4,
        4,
        4,
        4,
    ]


def test_the_new_catalogue_patterns_grow_as_their_structure_says():
    """Slide's 3 x 3 windows cut at the border: radius side / 2 (a square root of N); the
    Sparse Transformer's fixed blocks: radius 2 at any N, token 0 the one center."""
    patterns = {k: mask_design.CATALOGUE[k] for k in ["slide", "sparse_fixed"]}
    table = mask_design.graph_table(patterns, [64, 256, 1024]).set_index(["pattern", "n"])
    assert [table.loc[("slide", n), "radius"] for n in (64, 256, 1024)] == [4, 8, 16]
    assert (table.loc["sparse_fixed", "radius"] == 2).all()
    assert (table.loc["sparse_fixed", "centers"] == 1).all()
    assert table.loc["slide", "strongly_connected"].all()
    by_n, growth = mask_design.growth_table(table.reset_index())
    assert growth.loc["slide", "law"] == "square root of N"
    assert growth.loc["sparse_fixed", "law"] == "constant"


def test_graph_table_has_one_row_per_pattern_and_size():
    patterns = {k: mask_design.CATALOGUE[k] for k in ["causal", "swin"]}
    table = mask_design.graph_table(patterns, [16, 64])
    assert len(table) == 4 and set(table["pattern"]) == {"causal", "swin"}
    assert table.set_index(["pattern", "n"]).loc[("causal", 64), "radius"] == 1


def test_radius_growth_names_the_law():
    ns = np.array([64, 256, 1024])
    assert mask_design.radius_growth(ns, [1, 1, 1]).law == "constant"
    assert mask_design.radius_growth(ns, ns // 8).law == "linear in N"
    fitted = mask_design.radius_growth(ns, np.sqrt(ns) / 2)
    assert fitted.law == "square root of N" and fitted.exponent == pytest.approx(0.5)
    assert mask_design.radius_growth(ns, [1, math.inf, 2]).law == "no center"


def test_window_of_radius_gives_that_radius():
    assert masks.radius(masks.make("sliding_window", 256, window=22)) == 6
    assert mask_design.window_of_radius(256, 6) == 22
    for n in [16, 64, 256]:
        for r in [1, 2, 3, 6]:
            w = mask_design.window_of_radius(n, r)
            assert masks.radius(masks.make("sliding_window", n, window=w)) <= r
            if w > 1:
                assert masks.radius(masks.make("sliding_window", n, window=w - 1)) > r


def test_component_spread_splits_mu_squared():
    X = torch.randn(3, 8, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    labels = np.array([0, 1, 0, 1, 0, 1, 2, 2])
    within, between = mask_design.component_spread(X, labels)
    torch.testing.assert_close(within**2 + between**2, metrics.mu(X) ** 2)
    by_hand = sum(metrics.mu(X[:, labels == c]) ** 2 for c in range(3))
    torch.testing.assert_close(within**2, by_hand)


def test_run_components_reproduces_simulate():
    mask = [masks.make("swin_2d", 16, window=2), masks.make("swin_2d", 16, window=2)]
    config = san.SANConfig(d=8, n_layers=6, init="orthogonal_v")
    X0 = torch.randn(2, 16, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out = mask_design.run_components(X0, config, mask, [0, 1], d_qk=1.0)
    ref = san.simulate(X0, config, mask=mask, d_qk=1.0, seed=[0, 1])["mu"].numpy()
    np.testing.assert_allclose(out["mu"], ref, rtol=1e-12)
    np.testing.assert_allclose(out["within"] ** 2 + out["between"] ** 2, ref**2, rtol=1e-10)


def test_rank_agreement_is_kendall_tau_b_with_a_permutation_p_value():
    x = np.array([1, 1, 1, 2, 3, 8, 16, 16])
    y = np.array([-9.0, -3.0, -1.0, -2.0, 0.5, 0.2, 1.0, 1.5])
    tau, p = mask_design.rank_agreement(x, y, n_perm=4000, seed=1)
    assert tau == pytest.approx(stats.kendalltau(x, y).statistic)
    assert 0 < p < 0.05
    tau_neg, p_neg = mask_design.rank_agreement(x, -y, n_perm=2000)
    assert tau_neg == pytest.approx(-tau) and p_neg > 0.9
    assert mask_design.rank_agreement(x, y, n_perm=500, seed=2) == mask_design.rank_agreement(
        x, y, n_perm=500, seed=2
    )


def test_tail_slopes_and_halving_depth():
    t = np.arange(41.0)
    mu = np.stack([np.exp(-0.5 * t), np.exp(-0.01 * t)], axis=1)
    np.testing.assert_allclose(fit.tail_slopes(mu), [-0.5, -0.01])
    np.testing.assert_array_equal(mask_design.halving_depth(mu), [2.0, np.nan])
