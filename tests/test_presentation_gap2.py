"""Presentation helpers of the chapters on depth, gradients and training (15, 17, 18)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from collapse import gap_readings, gradients, plotting, tables, training  # noqa: E402


def test_depth_names_and_styles_tell_the_nine_curves_apart():
    labels = list(gap_readings.gap.fig7_variants("markov"))
    names = [gap_readings.depth_name(label) for label in labels]
    styles = [tuple(gap_readings.depth_style(label).values()) for label in labels]
    assert len(set(names)) == len(set(styles)) == 9
    assert gap_readings.depth_name("A⊥+skip+LN") == r"$A^\perp$+skip+LN"


def test_figure_cells_keep_values_above_the_floor_in_order():
    figure = {"A⊥": {1: 9.6, 10: 1.8}, "A": {1: 1.0}, "Identity A": {8: 3.2}}
    assert gap_readings.figure_cells(figure) == [
        ("A⊥", 1, 9.6), ("A⊥", 10, 1.8), ("Identity A", 8, 3.2)
    ]


def test_seed_study_groups_consecutive_runs():
    runs = {"A⊥": np.array([[1.0, 1.0, 2.0, 2.0, 9.0]])}  # one depth, five runs
    study = gap_readings.seed_study(runs, [("A⊥", 0, 2.0)], group=2, tolerance=0.2)
    row = study.loc[("A⊥", 0)]
    assert row["group means"].tolist() == [1.0, 2.0]  # the fifth run is in no group
    assert row["figure / first group"] == 2.0
    assert row["groups within ±20 %"] == 0.5
    assert row["figure / mean of all runs"] == pytest.approx(2.0 / 3.0)
    with pytest.raises(ValueError):
        gap_readings.seed_study(runs, [("A⊥", 0, 2.0)], group=6, tolerance=0.2)


def test_compare_cells_is_undecided_while_the_interval_straddles_an_edge():
    wide = {"A⊥": np.array([[1.0, 3.0, 1.0, 3.0]])}
    cmp = gap_readings.compare_cells(wide, [("A⊥", 0, 2.0)], 0.2)
    assert cmp.loc[0, "status"] == "undecided"
    assert cmp.loc[0, "CI low"] < 2.0 < cmp.loc[0, "CI high"]


def test_glue_helpers_run_outside_a_notebook():
    tables.glue_md("key", "$x$")
    tables.glue_each({"a": 1, "b": "two"})


def test_plain_log_ticks_and_ratio_intervals():
    fig, (ax1, ax2) = plt.subplots(1, 2)
    ax1.set_yscale("log")
    plotting.plain_log_ticks(ax1)
    assert ax1.yaxis.get_major_formatter()(2.0, 0) == "2"
    arms = pd.DataFrame(
        {"ratio": [0.5, 1.2, 0.9], "ci low": [0.4, 1.0, 0.8], "ci high": [0.6, 1.4, 1.0]},
        index=pd.MultiIndex.from_tuples([("a", "x", 1), ("a", "x", 2), ("b", "x", 1)]),
    )
    plotting.ratio_intervals(ax2, arms, str)
    assert len(ax2.get_xticks()) == 2  # two cases, the arms side by side
    assert all(0.4 <= t <= 1.4 for t in ax2.get_yticks())
    plt.close(fig)


def test_benefit_readings_agree_on_the_outcome():
    gains = pd.DataFrame(
        {"ratio": [0.8, 1.0, 0.97], "ci low": [0.7, 0.96, 0.9], "ci high": [0.9, 1.1, 1.02]},
        index=pd.MultiIndex.from_tuples([("markov", 1), ("normal", 1), ("xavier", 2)]),
    )
    table = training.benefit_table(gains)
    assert table["Gain of 5 % or more"].tolist() == ["yes", "no", "undecided"]
    assert training.benefit_rows(gains, "holds") == "Markov $A$ at depth 1"
    assert training.benefit_rows(gains, "inconclusive") == "$A(X)$, Xavier at depth 2"
    assert training.benefit_text(gains, ("normal", 1)) == "1.00 [0.96, 1.10]"
    assert training.case_tick(("xavier", 5)) == "Xavier\n$L = 5$"


def test_best_curves_pick_each_fix_settings_best_rate():
    losses = torch.ones(3, 2, 2, 2)  # steps+1, seeds, lrs, fixes
    losses[-1, :, 1, 0] = 0.5  # no fix: the second rate is best
    losses[-1, :, 0, 1] = 0.25  # fix: the first
    curves = training.best_curves(losses)
    assert curves[False][-1].tolist() == [0.5, 0.5]
    assert curves[True][-1].tolist() == [0.25, 0.25]


def test_column_sum_spread_is_zero_for_uniform_attention():
    assert training.column_sum_spread(torch.zeros(2, 4, 4)) == pytest.approx([0.0, 0.0])


def test_gradient_names_and_norm_curve():
    assert gradients.config_name("normal", "skip_ln", True) == r"$A(X)^\perp$+skip+LN"
    frame = pd.DataFrame({"kind": "markov", "T": [8, 8, 16, 16], "seed": [0, 1, 0, 1],
                          "norm": [1.0, 2.0, 3.0, 4.0]})
    curve = gradients.norm_curve(frame, kind="markov")
    assert curve.shape == (2, 2) and curve.loc[16, 1] == 4.0
