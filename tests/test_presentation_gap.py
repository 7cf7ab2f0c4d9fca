"""The readings and presentation helpers of the Mind-the-Gap chapters (14-22): small cases
whose answer is known by hand."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from collapse import gap_readings, plotting, tables, workloads  # noqa: E402


def test_markov_matrix_is_seeded_per_seed_and_size():
    A = gap_readings.markov_matrix(5, 3)
    torch.testing.assert_close(A, gap_readings.markov_matrix(5, 3))
    assert not torch.equal(A, gap_readings.markov_matrix(5, 4))
    torch.testing.assert_close(A.sum(-1), torch.ones(5, dtype=torch.float64))


def test_markov_summary_reads_the_perron_eigenvalue_and_the_bulk():
    spectrum = gap_readings.dense_spectrum(40, [0, 1])
    row = gap_readings.markov_summary(spectrum, 40)
    assert row["max |λ1 − 1|"] < 1e-12
    assert row["√T σ2 min"] <= row["median √T σ2"] <= row["√T σ2 max"]
    np.testing.assert_allclose(
        gap_readings.bulk(spectrum["sv"], 40)[:, 0], math.sqrt(40) * spectrum["sv"][:, 1]
    )


def test_fix_summary_sees_the_deflation():
    row = gap_readings.fix_summary(gap_readings.dense_spectrum(30, [0]))
    assert row["max ‖A⊥1‖∞"] < 1e-12
    assert row["eigenvalue mismatch"] < 1e-8
    assert row["σ1(A⊥)/σ2(A) min"] >= 1 - 1e-12  # Weyl: sigma_1(A-perp) >= sigma_2(A)


def test_edge_summary_sorts_and_names_the_method():
    tops = {64: torch.tensor([[1.0, 0.25]]), 16: torch.tensor([[1.0, 0.5]])}
    edge = gap_readings.edge_summary(tops, lanczos_T=[64])
    assert list(edge.index) == [16, 64]
    assert list(edge["method"]) == ["dense", "Lanczos"]
    assert edge.loc[16, "median √T σ2"] == pytest.approx(2.0)


def test_mean_interval_is_the_student_t_interval():
    m = gap_readings.mean_interval([1.0, 2.0, 3.0])
    assert (m.mean, m.std) == (2.0, 1.0)
    assert m.high - m.mean == pytest.approx(4.302652729911275 / math.sqrt(3))
    assert m.mean - m.low == pytest.approx(m.high - m.mean)


def test_local_slopes_of_a_power_law_are_its_exponent():
    row = pd.Series([2.0 * T**0.5 for T in (10, 40, 160)], index=[10, 40, 160])
    slopes = gap_readings.local_slopes(row)
    assert list(slopes.index) == ["10 to 40", "40 to 160"]
    np.testing.assert_allclose(slopes.to_numpy(), 0.5)


def _sweep(slope_plain, slope_fixed):
    """A width_sweep-like frame: two seeds, sr = c T^slope at layer 1."""
    rows = []
    for seed, c in enumerate((1.0, 1.1)):
        for T in (20, 40, 80):
            for label, slope in (("A", slope_plain), ("A⊥", slope_fixed)):
                value = c * T**slope
                rows.append({"layer": 1, "gamma": 1.0, "variant": label, "T": T, "seed": seed,
                             "gram_stable_rank": value})
    return pd.DataFrame(rows)


def test_width_checks_read_slopes_and_ratios():
    checks = gap_readings.width_checks(_sweep(0.0, 1.0), {"Markov": ("A", "A⊥")}, [1.0])
    row = checks.loc[("Markov", 1.0)]
    assert row["slope, no fix"] == pytest.approx(0.0, abs=1e-12)
    assert row["slope, fix"] == pytest.approx(1.0)
    assert row["min fix / no fix, T ≥ 40"] == pytest.approx(40.0)
    assert gap_readings.interval_text(row, "slope, fix") == "[1, 1]"


def test_loglog_row_and_layer_slopes():
    frame = _sweep(0.0, 1.0)
    assert gap_readings.loglog_row(frame, "gram_stable_rank", 1.0, "A⊥")["slope"] == (
        pytest.approx(1.0)
    )
    assert gap_readings.layer_slopes(frame, "A⊥", 1.0, 1).loc[1] == pytest.approx(1.0)


def test_histogram_against_law_draws_the_density_and_the_note():
    fig, ax = plt.subplots()
    x = np.random.default_rng(0).uniform(0, 1, 500)
    line = plotting.histogram_against_law(
        ax, x, lambda g: 2 * g, np.linspace(0, 1, 3), law_label="law", note="KS 0.1", bins=5
    )
    np.testing.assert_allclose(line.get_ydata(), [0, 1, 2])
    assert len(ax.patches) == 5 and ax.texts[0].get_text() == "KS 0.1"
    assert sum(p.get_height() * p.get_width() for p in ax.patches) == pytest.approx(1.0)
    plt.close(fig)


def test_loglog_ticks():
    fig, ax = plt.subplots()
    plotting.loglog_ticks(ax, [20, 80])
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert list(ax.get_xticks()) == [20, 80]
    plt.close(fig)


def test_math_cells_and_span():
    assert tables.math_cells([2e-9, 0.25], 2) == ["$2 \\times 10^{-9}$", "$0.25$"]
    assert tables.span([0.5], [1.25], ".1f") == ["0.5 to 1.2"]
    with pytest.raises(ValueError):
        tables.span([1, 2], [3])


def test_spectral_gap_workload_counts_the_dense_spectra():
    work = workloads.of(
        "spectral-gap",
        {"n_seeds": 1, "T_values": [10], "fix_T": [], "lanczos_T": [], "timing_T": 16,
         "kq_T": [], "gammas": [], "gamma_T": 10},
    )
    svd, eig = 8 / 3 * 10**3, 10 * 10**3
    assert work.flops == pytest.approx(svd + eig + 8 / 3 * 16**3 + 410 * 16**2)
