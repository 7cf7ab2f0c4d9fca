"""The implicit-fixes chapter's tables and figures (collapse.implicit_fixes, tables)."""

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

from collapse import implicit_fixes, tables
from collapse.attention_maps import lambda_init

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def width_frame():
    """Two seeds of sr = c T^2 (seed 0, c = 1) and c T (seed 1) at T = 8, 16, 32, 64."""
    rows = []
    for T in (8, 16, 32, 64):
        rows += [
            {"attention": "markov", "variant": "A⊥", "T": T, "seed": 0, "gram_stable_rank": T**2},
            {"attention": "markov", "variant": "A⊥", "T": T, "seed": 1, "gram_stable_rank": T},
            {"attention": "normal", "variant": "A⊥", "T": T, "seed": 0, "gram_stable_rank": 1.0},
        ]
    return pd.DataFrame(rows)


def test_seed_runs_is_one_column_per_seed_of_one_map():
    runs = implicit_fixes.seed_runs(width_frame(), "markov", "A⊥")
    assert list(runs.index) == [8, 16, 32, 64] and list(runs.columns) == [0, 1]
    assert runs.loc[16, 0] == 256 and runs.loc[16, 1] == 16


def test_range_slopes_fit_the_mean_and_spread_the_seeds():
    runs = implicit_fixes.seed_runs(width_frame(), "markov", "A⊥")
    out = implicit_fixes.range_slopes(runs, {"": (0, math.inf), " small": (0, 16),
                                             " none": (100, math.inf)})
    assert list(out) == ["slope", "spread", "slope small", "spread small", "slope none",
                         "spread none"]
    assert out["spread"] == pytest.approx(np.std([2.0, 1.0], ddof=1))
    assert 1 < out["slope"] < 2  # the mean (T^2 + T) / 2 bends from T towards T^2
    assert out["slope small"] < out["slope"]
    assert math.isnan(out["slope none"]) and math.isnan(out["spread none"])


def test_worst_quotients_take_the_T_where_the_map_shrinks_least():
    rows = []
    for T, fix in ((8, 0.5), (16, 0.9)):  # the quotient is largest at T = 16
        for seed in range(7):
            rows += [{"attention": "markov", "T": T, "seed": seed, "variant": "softmax",
                      "ratio": 2.0},
                     {"attention": "markov", "T": T, "seed": seed, "variant": "fix",
                      "ratio": 2.0 * fix * (1 + 0.01 * seed)}]
    out = implicit_fixes.worst_quotients(pd.DataFrame(rows), ["fix"])
    median, low, high = out[("markov", "fix")]
    assert median == pytest.approx(0.9 * 1.03)
    assert low == pytest.approx(0.9) and high == pytest.approx(0.9 * 1.06)


def test_depth_table_counts_runs_at_zero_and_leaves_them_out_of_the_mean():
    sr = np.array([[8.0, 8.0, 8.0], [2.0, 4.0, np.nan], [1.0, 1.0, np.nan]])
    frame = implicit_fixes.depth_table({("A⊥", "+skip"): sr}, {"A⊥": "fix"}, [1, 2], "map")
    assert list(frame.columns) == ["map", r"$\ell = 1$", r"$\ell = 2$", "runs with $X = 0$"]
    assert frame.iloc[0].tolist() == ["fix+skip", 3.0, 1.0, 1]


def test_value_and_interval_formats_each_value_with_its_ends():
    assert tables.value_and_interval([0.25, -1e-5], [0.1, 0], [math.inf, 2]) == [
        "0.25 [0.1, ∞]", "-1e-5 [0, 2]"]
    with pytest.raises(ValueError):
        tables.value_and_interval([1.0], [0.0, 1.0], [2.0])


def median_frame(columns, kinds=("markov", "normal"), labels=("softmax",), Ts=(16, 64)):
    index = pd.MultiIndex.from_product([kinds, labels, Ts], names=["attention", "variant", "T"])
    return pd.DataFrame({c: np.full(len(index), v) for c, v in columns.items()}, index=index)


def test_spectra_figure_draws_three_panels_per_kind_of_scores():
    median = median_frame({"top": 1.0, "edge": 0.5, "ratio": 2.0})
    curves = {"softmax": {"color": "C0", "label": "softmax"}}
    fig = implicit_fixes.spectra_figure(median, {"markov": "Markov", "normal": "KQ"}, curves)
    assert len(fig.axes) == 6
    assert fig.axes[1].get_lines()[0].get_ydata().tolist() == [2.0, 4.0]  # sqrt(T) x edge
    assert fig.axes[3].get_ylabel().startswith("KQ")
    assert fig.axes[0].get_xlabel() == "" and fig.axes[3].get_xlabel() == "tokens $T$"


def test_crossover_figure_puts_T_over_its_star_on_the_x_axis():
    median = median_frame({"gain": 0.2, "edge": 0.1, "ratio": 1.5}, labels=("d",))
    curves = {"d": {"color": "C3", "label": "diff"}}
    fig = implicit_fixes.crossover_figure(median, {"d": 0.6}, {"markov": 2.0, "normal": 3.0},
                                          curves)
    left = fig.axes[0]
    markov, normal = left.get_lines()[1:3]
    assert markov.get_xdata() == pytest.approx(np.array([16, 64]) / 34.0)
    assert normal.get_xdata() == pytest.approx(np.array([16, 64]) / (34.0 * 9 / 4))
    assert (markov.get_linestyle(), normal.get_linestyle()) == ("-", "--")
    assert normal.get_label() == "diff, key-query"


def test_schedule_figure_follows_lambda_init_layer_by_layer():
    fig = implicit_fixes.schedule_figure({"markov": 2.0, "normal": 3.0},
                                         {"markov": "M", "normal": "KQ"}, [512, 2048],
                                         n_layers=4, n_heads=20)
    ax = fig.axes[0]
    markov, normal = ax.get_lines()[:2]
    expected = [float(implicit_fixes.crossover(lambda_init(layer))) for layer in range(1, 5)]
    assert markov.get_ydata() == pytest.approx(expected)
    assert normal.get_ydata() == pytest.approx(np.array(expected) * 9 / 4)
    assert [line.get_ydata()[0] for line in ax.get_lines()[2:]] == [512, 2048]
    assert len(ax.collections) == 2  # one head band per kind


def test_width_figure_marks_the_star_and_twice_it():
    curves = {"A⊥": {"color": "C1", "ls": "-", "label": "fix"}}
    fig = implicit_fixes.width_figure(width_frame(), {"markov": "M", "normal": "KQ"}, curves,
                                      0.8, {"markov": 2.0, "normal": 3.0})
    star = float(implicit_fixes.crossover(0.8))
    assert [line.get_xdata()[0] for line in fig.axes[0].get_lines()[1:]] == pytest.approx(
        [star, 2 * star])
    assert fig.axes[0].get_lines()[0].get_ydata().tolist() == [
        (T**2 + T) / 2 for T in (8, 16, 32, 64)]
    assert [ax.get_title() for ax in fig.axes] == ["M", "KQ"]


def test_depth_figure_has_one_panel_per_module_from_layer_one():
    sr = np.arange(8.0).reshape(4, 2) + 1
    runs = {(label, m): sr for label in ("A", "B") for m in ("", "+LN", "+skip", "+skip+LN")}
    curves = {"A": {"label": "a"}, "B": {"label": "b"}}
    fig = implicit_fixes.depth_figure(runs, curves)
    assert [ax.get_title() for ax in fig.axes] == ["bare", "LN", "skip", "skip+LN"]
    assert fig.axes[0].get_lines()[0].get_xdata().tolist() == [1, 2, 3]
    assert [bool(ax.get_ylabel()) for ax in fig.axes] == [True, False, True, False]


def test_gradient_slopes_figure_spreads_the_maps_around_each_module():
    slopes = pd.DataFrame({("markov", "plain"): [2.0, 1.0], ("markov", "ln"): [3.0, 0.5]},
                          index=["softmax", "A⊥"])
    curves = {"softmax": {"color": "C0", "label": "softmax"}, "A⊥": {"color": "C1", "label": "f"}}
    fig = implicit_fixes.gradient_slopes_figure(slopes, {"markov": "M"}, curves,
                                                {"plain": "bare", "ln": "LN"})
    first, second = fig.axes[0].get_lines()[:2]
    assert first.get_xdata() == pytest.approx([-0.15, 0.85])
    assert second.get_ydata().tolist() == [1.0, 0.5]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["bare", "LN"]
