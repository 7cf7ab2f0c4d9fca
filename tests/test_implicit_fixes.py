"""The spectra of the implicit-fix maps: the gain and the bulk on hand-built matrices, the
crossover formulas, and the spike law of differential attention on random Markov maps."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from collapse import attention, gap, markov
from collapse import implicit_fixes as fx
from collapse.checks import ParameterError


def test_gain_and_bulk_by_hand():
    T = 6
    u = torch.ones(T, dtype=torch.float64) / math.sqrt(T)
    B = torch.randn(T, T, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    B = B - B.sum(-1, keepdim=True) / T  # B u = 0
    M = 0.3 * torch.outer(u, u) + B
    assert fx.gain(M).item() == pytest.approx(0.3)
    torch.testing.assert_close(fx.bulk(M), B)
    summary = fx.spectrum(M)
    assert summary["top"] == pytest.approx(torch.linalg.svdvals(M)[0].item())
    assert summary["edge"] == pytest.approx(torch.linalg.svdvals(B)[0].item())
    A = markov.random_markov(30, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(fx.bulk(A), attention.remove_outlier(A))
    with pytest.raises(ParameterError, match="one T x T matrix"):
        fx.spectrum(A.expand(2, 30, 30))


def test_crossover_formulas():
    assert fx.crossover(0.8) == pytest.approx(164.0)
    assert fx.crossover(0.2) == pytest.approx(6.5)
    assert fx.crossover(0.8, edge_constant=3.0) == pytest.approx(164.0 * 9 / 4)
    np.testing.assert_allclose(fx.crossover([0.5, 1.5]), [20.0, 4 * 3.25 / 0.25])
    T = fx.crossover(0.7)  # at T* the gain 0.3 equals the predicted edge
    assert fx.bulk_edge(T, 0.7) == pytest.approx(0.3)
    # the spike law leaves the edge continuously at T*/2, and tends to theta for large T
    below, above = fx.spike_top(T / 2 * (1 - 1e-9), 0.7), fx.spike_top(T / 2 * (1 + 1e-9), 0.7)
    assert below == pytest.approx(above, rel=1e-6)
    assert below == pytest.approx(fx.bulk_edge(T / 2, 0.7), rel=1e-6)
    assert fx.spike_top(1e9, 0.7) == pytest.approx(0.3, rel=1e-6)
    with pytest.raises(ParameterError, match="lam must differ from 1"):
        fx.crossover(1.0)


def test_measured_crossover_interpolates_in_log_log():
    T = [10, 100, 1000]
    assert fx.measured_crossover(T, [1, 1, 1], [10, 1 / 10, 1 / 100]) == pytest.approx(
        math.sqrt(10) * 10
    )
    assert math.isnan(fx.measured_crossover(T, [1, 1, 1], [2, 3, 4]))
    with pytest.raises(ParameterError, match="T_values must increase"):
        fx.measured_crossover([10, 5], [1, 1], [1, 1])


def test_differential_markov_follows_the_spike_law():
    """One seed at T = 1024 (the law's own constant c = 2): the edge is 2 sqrt(1 + lam^2) /
    sqrt(T), and sigma_1 is the spike law's above T*/2 (lam = 0.5, 0.8) and the edge below
    (lam = 0.95). Single edges scatter a few percent (heavy tails): 8 % is allowed."""
    variants = {"A⊥": {"fix": True}} | {
        f"{lam}": {"map": "differential", "lam": lam} for lam in (0.5, 0.8, 0.95)
    }
    frame = fx.spectrum_sweep(variants, [1024], [0]).set_index("variant")
    assert frame.loc["A⊥", "gain"] < 1e-12
    for lam in (0.5, 0.8, 0.95):
        row = frame.loc[f"{lam}"]
        assert row["gain"] == pytest.approx(1 - lam, rel=1e-9)
        assert row["edge"] == pytest.approx(fx.bulk_edge(1024, lam), rel=0.08)
        assert row["top"] == pytest.approx(fx.spike_top(1024, lam), rel=0.08)
    assert frame.loc["0.95", "ratio"] < 1.02 < 1.5 < frame.loc["0.8", "ratio"]
    assert frame.loc["0.5", "top"] == pytest.approx(fx.spike_top(1024, 0.5), rel=0.002)


def test_spectrum_sweep_pairs_the_maps_of_a_seed():
    variants = {"A": {}, "A⊥": {"fix": True}, "centred": {"map": "centred"}}
    frame = fx.spectrum_sweep(variants, [40, 80], [0, 3], attention="normal")
    assert list(frame.columns) == [
        "variant",
        "attention",
        "T",
        "seed",
        "top",
        "gain",
        "edge",
        "ratio",
    ]
    assert len(frame) == 12
    by = frame.set_index(["T", "seed", "variant"])
    for T in (40, 80):
        for seed in (0, 3):
            # bulk(A) is A⊥ itself: one draw, paired
            assert by.loc[(T, seed, "A"), "edge"] == pytest.approx(by.loc[(T, seed, "A⊥"), "top"])
            assert by.loc[(T, seed, "centred"), "top"] == by.loc[(T, seed, "A⊥"), "top"]
    with pytest.raises(ParameterError, match="variants must name"):
        fx.spectrum_sweep({}, [40], [0])


def test_lambda_draws_and_schedule():
    lam = fx.lambda_draws(3, 4000, seed=2)
    assert lam.shape == (4000,)
    assert lam.mean().item() == pytest.approx(0.8 - 0.6 * math.exp(-0.6), abs=0.01)
    # exp(a) - exp(b), a and b with variance 64 * 0.1^4: std about sqrt(2 * 0.0064)
    assert lam.std().item() == pytest.approx(math.sqrt(2 * 0.0064), rel=0.1)
    assert torch.equal(lam, fx.lambda_draws(3, 4000, seed=2))
    table = fx.schedule([1, 12], [100, 10000], n_heads=500)
    assert list(table["layer"]) == [1, 12]
    assert table.loc[0, "T* (lam_init)"] == pytest.approx(6.5)
    first, deep = table.iloc[0], table.iloc[1]
    assert first["above at T=100"] > 0.99 and deep["above at T=100"] < 0.5  # T* = 130
    assert deep["above at T=10000"] > 0.9
    assert gap.GapConfig(T=4, d=4, n_layers=1, map="differential").layer_lambda(12) == (
        pytest.approx(deep["lam_init"])
    )


def test_median_interval_is_the_order_statistics_interval():
    x = np.arange(20.0)[::-1]  # order does not matter
    median, low, high = fx.median_interval(x)
    # n = 20: [x_(6), x_(15)] covers 1 - 2 P(B <= 5) = 0.9586; [x_(7), x_(14)] only 0.885
    assert (median, low, high) == (9.5, 5.0, 14.0)
    assert fx.median_interval(x, level=0.8)[1:] == (6.0, 13.0)
    # too few values for 95 %: the range, which covers 1 - 2^(1-n)
    assert fx.median_interval([3.0, 1.0, 2.0, 5.0, 4.0]) == (3.0, 1.0, 5.0)
    assert fx.median_interval([2.0, np.nan, 1.0]) == (1.5, 1.0, 2.0)
    with pytest.raises(ParameterError, match="level must lie in"):
        fx.median_interval(x, level=1.0)
    with pytest.raises(ParameterError, match="at least one number"):
        fx.median_interval([np.nan])


def test_median_interval_covers_the_median_at_its_level():
    rng = np.random.default_rng(0)
    draws = rng.lognormal(size=(2000, 60))  # heavy-tailed, true median 1
    hits = [low <= 1 <= high for _, low, high in map(fx.median_interval, draws)]
    assert 0.94 <= np.mean(hits) <= 0.985


def test_spectrum_sweep_limits_maps_and_thins_seeds_at_large_T():
    variants = {"A": {}, "diff": {"map": "differential", "lam": 0.6}}
    frame = fx.spectrum_sweep(
        variants, [8, 16, 32], range(40), T_max={"diff": 16}, full_T=8, min_seeds=3
    )
    counts = frame.groupby(["variant", "T"]).size()
    # all 40 seeds up to T = 8, then 40 (8 / T)^2: 10 at T = 16, at least 3 at T = 32
    assert counts.to_dict() == {
        ("A", 8): 40,
        ("A", 16): 10,
        ("A", 32): 3,
        ("diff", 8): 40,
        ("diff", 16): 10,
    }
    # the same seed draws the same maps whatever else runs beside it
    alone = fx.spectrum_sweep({"A": {}}, [16], [5]).iloc[0]
    row = frame[(frame["variant"] == "A") & (frame["T"] == 16) & (frame["seed"] == 5)].iloc[0]
    assert row["top"] == alone["top"] and row["edge"] == alone["edge"]
    with pytest.raises(ParameterError, match="T_max must name variants"):
        fx.spectrum_sweep(variants, [8], [0], T_max={"other": 8})


def test_crossover_summary_reads_the_medians_and_their_intervals():
    lam = 0.6  # T* = 34, gain 0.4
    star = fx.crossover(lam)
    rows = []
    for t in [4, 8, 16, 32, 64, 128]:
        for seed in range(20):
            edge = 0.4 * math.sqrt(star / t) * (1 + 0.01 * (seed - 9.5))  # crosses at T* exactly
            ratio = 1.05 if t <= star / 4 else 2.0 + 0.01 * seed
            rows.append({"T": t, "seed": seed, "gain": 0.4, "edge": edge, "ratio": ratio})
    summary = fx.crossover_summary(pd.DataFrame(rows), lam)
    assert summary["T* predicted"] == pytest.approx(star)
    assert summary["T* measured"] == pytest.approx(star, rel=1e-9)
    # the edge's interval is [x_(6), x_(15)]: factors 1 - 0.045 and 1 + 0.045; T* goes as edge^2
    assert summary["T* low"] == pytest.approx(star * 0.955**2, rel=1e-9)
    assert summary["T* high"] == pytest.approx(star * 1.045**2, rel=1e-9)
    assert summary["below T*/4"] == summary["below high"] == pytest.approx(1.05)
    assert summary["above 2T*"] == pytest.approx(2.095)
    assert summary["above spread"] == pytest.approx(np.std(0.01 * np.arange(20), ddof=1))
    assert summary["n seeds"] == 20
    # a grid that stops before the crossing leaves it unmeasured
    early = fx.crossover_summary(pd.DataFrame(rows).query("T <= 16"), lam)
    assert math.isnan(early["T* measured"]) and math.isnan(early["T* high"])
    assert math.isnan(early["above 2T*"])
    # an interval whose upper end does not cross on the grid reaches beyond it
    wide = pd.DataFrame(rows).assign(edge=lambda f: f["edge"] * np.where(f["seed"] >= 14, 3, 1))
    late = fx.crossover_summary(wide.query("T <= 64"), lam)
    assert math.isfinite(late["T* measured"]) and late["T* high"] == math.inf
