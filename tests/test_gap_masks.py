"""The outliers of random masked attention, counted and removed (collapse.gap_masks)."""

import pytest
import torch

from collapse import gap, gap_masks, masks
from collapse.attention import masked_softmax
from collapse.checks import ParameterError


def _spiked(T: int, noise: float, seed: int = 0) -> torch.Tensor:
    """11^T / T (rows summing to 1, the one outlier 1) plus Gaussian noise of std
    noise / sqrt(T) with its common direction removed (B u = 0): a bulk of edge ~ 2 noise."""
    g = torch.Generator().manual_seed(seed)
    B = noise / T**0.5 * torch.randn(T, T, generator=g, dtype=torch.float64)
    return torch.full((T, T), 1 / T, dtype=torch.float64) + B - B.mean(-1, keepdim=True)


def test_the_rule_counts_the_spike_and_removes_exactly_it():
    """Without a mask the bulk edge is sigma_1(M - 11^T/T) = sigma_1(B); the spike 1 stands
    above 1.1 x 2 x 0.1, and removing it leaves the rest of the spectrum as it was."""
    T = 200
    M = _spiked(T, noise=0.1)
    out = gap_masks.remove_outliers(M, torch.ones(T, T, dtype=torch.bool))
    assert int(out["count"]) == 1
    kept = torch.linalg.svdvals(out["deflated"])
    torch.testing.assert_close(kept[: T - 1], out["singular"][1:], rtol=1e-10, atol=1e-12)
    assert kept[0] <= gap_masks.OUTLIER_MARGIN * out["edge"]


def test_a_batch_counts_each_map_on_its_own():
    """A spike of 1 above a bulk of edge 0.2 is an outlier; above a bulk of edge 2 it is not
    (it does not even leave the bulk: 1 < sqrt(2) x half the edge)."""
    complete = torch.ones(100, 100, dtype=torch.bool)
    batch = torch.stack([_spiked(100, 0.1, 1), _spiked(100, 1.0, 2)])
    out = gap_masks.remove_outliers(batch, complete)
    assert out["count"].tolist() == [1, 0]
    torch.testing.assert_close(out["deflated"][1], batch[1])
    for b in range(2):
        alone = gap_masks.remove_outliers(batch[b], complete)
        torch.testing.assert_close(out["deflated"][b], alone["deflated"])


@pytest.mark.parametrize("T", [32, 128])
def test_without_a_mask_the_rule_counts_mind_the_gaps_one_outlier(T):
    """sigma_1(A) >= ||A u|| = 1 and sigma_2(A) <= sigma_1(A - 11^T/T), of order 2/sqrt(T)."""
    draws = gap_masks.layer_draws(T, [0, 1, 2])
    A = torch.softmax(draws["G"], -1)
    out = gap_masks.remove_outliers(A, masks.make("complete", T))
    assert out["count"].tolist() == [1, 1, 1]
    torch.testing.assert_close(
        out["edge"], torch.linalg.matrix_norm(gap.remove_outlier(A), 2), rtol=1e-12, atol=0
    )


def test_the_sink_is_one_outlier():
    """Every row gives the sink about a third of its weight: one column of norm ~ sqrt(T)."""
    T = 256
    draws = gap_masks.layer_draws(T, [0, 1])
    mask = masks.make("sink_window", T)
    out = gap_masks.remove_outliers(masked_softmax(draws["G"], mask), mask)
    assert out["count"].tolist() == [1, 1]
    assert bool((out["singular"][:, 0] > 0.3 * T**0.5).all())


def test_the_complete_mask_is_the_chapters_layer():
    """The sweep's draws are gap.simulate's: the complete mask's softmax and centred layers are
    the random Markov layer without and with the fix, for the same seeds."""
    T, seeds = 24, [0, 3]
    run = gap_masks.masked_width_sweep(["complete", "causal"], [T], seeds).width
    complete = run[run["mask"] == "complete"].set_index(["variant", "seed"])["gram_stable_rank"]
    for variant, fix in (("softmax", False), ("centred", True)):
        config = gap.GapConfig(T=T, d=T, n_layers=1, fix=fix)
        expected = gap.simulate(config, seeds)["gram_stable_rank"][1]
        got = torch.tensor([complete[(variant, s)] for s in seeds], dtype=torch.float64)
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=0)


def test_the_sweep_has_one_row_per_mask_map_T_and_seed():
    result = gap_masks.masked_width_sweep(["causal", "sink_window"], [8, 16], [0, 1])
    assert len(result.spectra) == 2 * 2 * 2 and len(result.width) == 2 * 3 * 2 * 2
    assert set(result.width["variant"]) == set(gap_masks.MAPS)
    assert (result.spectra["count"] >= 0).all()
    assert {"s1", "s8"} <= set(result.spectra.columns)


def test_the_slope_table_reads_each_seeds_slope():
    result = gap_masks.masked_width_sweep(["complete"], [20, 40, 80], [0, 1, 2])
    table = gap_masks.slope_table(result.width, ["complete"])
    assert list(table["variant"]) == list(gap_masks.MAPS)
    row = table.set_index("variant").loc["centred"]
    assert row["low"] <= row["slope"] <= row["high"] and row["slope"] > 0.3


def test_bad_masks_are_refused():
    with pytest.raises(ParameterError, match="mask must be one of"):
        gap_masks.masked_width_sweep(["no such mask"], [8], [0])
    with pytest.raises(ParameterError, match="distinct"):
        gap_masks.masked_width_sweep(["causal", "causal"], [8], [0])


def test_the_flops_grow_with_T_masks_and_seeds():
    small = gap_masks.masked_width_flops(1, [32], 1)
    assert gap_masks.masked_width_flops(1, [64], 1) == pytest.approx(8 * small, rel=0.05)
    assert gap_masks.masked_width_flops(4, [32], 3) > 3 * 4 * 0.9 * small
