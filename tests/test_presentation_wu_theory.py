"""The library pieces chapters 01-06 call: the mask registry, the theory's helpers, the mask
design tables, the counterexample's grid numbers, and the figures and tables they draw."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from collapse import counterexample as ce  # noqa: E402
from collapse import mask_design, masks, plotting, tables, theory  # noqa: E402
from collapse.checks import ParameterError  # noqa: E402


def test_every_registered_mask_builds_labels_and_colours():
    for name, entry in masks.REGISTRY.items():
        assert masks.make(name, 16).diagonal().all()
        assert masks.label(name) == entry.label
        expected = plotting.COLORS[entry.color] if entry.color is not None else plotting.COLORS[3]
        assert plotting.color_for(name, 3) == expected


def test_variants_are_their_builders_with_the_preset_options():
    for n in (4, 16, 17):
        dilated = masks.make("dilated_sliding_window", n, dilation=2)
        assert torch.equal(
            masks.make("dilated_global", n), dilated | masks.make("global_window", n, window=0)
        )
        assert torch.equal(
            masks.make("sliding_window_w4", n), masks.make("sliding_window", n, window=4)
        )
    with pytest.raises(ParameterError, match="unknown option 'window'"):
        masks.make("sliding_window_w4", 8, window=2)  # the preset is the variant


def test_colours_and_styles_of_masks_and_other_names():
    assert plotting.color_for("causal") == plotting.COLORS[1]
    assert plotting.color_for("not a mask", 2) == plotting.COLORS[2]
    assert plotting.linestyle_for("dilated_global") == "-."
    assert plotting.linestyle_for("not a mask") == "-"
    with pytest.raises(ParameterError):
        masks.label("not a mask")


def test_theorem1_slope_covers_every_row():
    assert theory.theorem1_slope(0.5, 1) == pytest.approx(math.log(0.5))
    assert math.isnan(theory.theorem1_slope(0.5, math.inf))
    assert theory.theorem1_slope(0.0, 3) == 0.0
    assert theory.theorem1_slope(0.1, np.int64(2)) == theory.theorem1_rate(0.1, 2)


def test_gaussian_tokens_reuse_each_seed_and_scale():
    X = theory.gaussian_tokens([3, 5], 6, 4)
    assert X.shape == (2, 6, 4) and X.dtype == torch.float64
    alone = torch.randn(6, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.equal(X[1], alone / 2)
    unit = theory.gaussian_tokens([3], 6, 4, unit=True)
    torch.testing.assert_close(unit.norm(dim=-1), torch.ones(1, 6, dtype=torch.float64))


def test_token_sets_and_their_cosines():
    X = theory.token_sets([0, 1], 5, 8)
    assert X.shape == (2, 2, 5, 8)
    cos = theory.min_cosine(X)
    assert (cos[:, 0] >= 0).all() and (cos[:, 1] < 0).all()
    pair = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    assert float(theory.min_cosine(pair)) == -1.0


def test_layernorm_rates_and_result_counts():
    mask_list = [masks.make("complete", 4), masks.make("causal", 4)]
    eps = np.full((2, 2, 2), 0.1)
    nonneg = np.array([[True, False], [True, False]])
    slopes, sources = theory.layernorm_rates(
        mask_list, eps, d=4, nonnegative_cosines=nonneg, full_rank=np.ones((2, 2), bool)
    )
    assert (sources[:, :, 0] == "Theorem 2").all()
    assert (sources[:, 0, 1] == "Corollary 1").all() and np.isnan(slopes[:, 1, 1]).all()
    assert slopes[0, 0, 0] == theory.theorem2_rate(0.1, 1, 4)
    assert theory.result_counts(["Theorem 2", "no center", "Theorem 2"]) == (
        "Theorem 2 (2), none (1)"
    )


def test_probe_patterns_reuse_a_deployed_pattern():
    probes, extra = mask_design.probe_patterns([1, 4], mask_design.CATALOGUE)
    assert probes[("global", 4)] == "longformer"
    assert set(extra) == {"sink_w1", "global_w1", "sink_w4"}
    assert extra["sink_w1"].label == "one sink, $w = 1$"
    assert extra["sink_w1"].options == {"window": 1, "n_sink": 1}


def test_catalogue_draws_bigbird_from_the_seed():
    patterns = mask_design.catalogue(5)
    assert patterns["bigbird"].options["seed"] == 5
    assert mask_design.CATALOGUE["bigbird"].options["seed"] == 0
    assert {m for family in mask_design.FAMILIES for m in family} == set(mask_design.CATALOGUE)


def test_growth_table_orders_patterns_and_sizes():
    patterns = {k: mask_design.CATALOGUE[k] for k in ["sliding_window", "complete"]}
    by_n, growth = mask_design.growth_table(mask_design.graph_table(patterns, [256, 64]))
    assert list(by_n.index) == ["sliding_window", "complete"] and list(by_n.columns) == [64, 256]
    assert by_n.loc["sliding_window"].tolist() == [32, 128]
    assert growth.loc["sliding_window", "law"] == "linear in N"
    assert growth.loc["complete", "law"] == "constant"


def test_collapse_table_columns():
    mu = np.array([[[1.0, 1.0]], [[0.5, 1.0]], [[0.25, 0.0]]])  # (layer, seed, pattern)
    eps = np.array([[0.5, 0.5]])
    radii = pd.Series({"a": 1, "b": math.inf})
    table = mask_design.collapse_table(mu, eps, radii, depth=1)
    assert list(table.index) == ["a", "b"]
    assert table.loc["a", "bound"] == pytest.approx(math.log(0.5))
    assert math.isnan(table.loc["b", "bound"])
    assert table.loc["a", "at depth"] == pytest.approx(math.log(0.5))
    assert table.loc["b", "fall"] == pytest.approx(-math.log(1e-17))
    assert table.loc["a", "rate"] == -table.loc["a", "tail"]


def test_layer_states_match_simulate():
    from collapse import san

    config = san.SANConfig(d=4, n_layers=3, init="orthogonal_v")
    X0 = theory.gaussian_tokens([0, 1], 5, 4)
    mask = masks.make("causal", 5)
    states = mask_design.layer_states(X0, config, mask, [0, 1], 1.0)
    assert states.shape == (4, 2, 5, 4)
    final = san.simulate(X0, config, mask=mask, d_qk=1.0, seed=[0, 1]).final
    torch.testing.assert_close(states[-1], final)


def test_counterexample_helpers():
    assert ce.basin_fraction(2.0) == pytest.approx((90 + 60) / 360)
    assert float(ce.angle(torch.tensor([0.0, -1.0], dtype=torch.float64))) == 270.0
    x, y = ce.unit(np.array([0.0, 90.0]))
    np.testing.assert_allclose([x, y], [[1, 0], [0, 1]], atol=1e-15)


def test_arc_numbers_on_a_coarse_grid():
    w, theta = 2.0, np.arange(5.0, 360.0, 30.0)
    X0 = ce.angle_grid_states(theta)
    labels = ce.limit_labels(ce.final_state(X0, w, 400), w)
    from collapse import metrics

    mu_end = metrics.mu(ce.final_state(X0, w, 400))
    mu_no_ln = metrics.mu(ce.trajectory(X0, w, 40, layernorm=False))
    numbers = ce.arc_numbers(theta, labels, mu_end, mu_no_ln, w)
    assert numbers["arc exact"] and numbers["arc misses"] == 0
    assert numbers["no LN: bound violations"] == 0
    assert numbers["μ(P-) error"] < 1e-9 and numbers["fixed-point residual"] < 1e-12
    assert numbers["predicted"] == ce.basin_fraction(w)


def test_torus_survivors_marks_antipodes():
    theta = np.array([45.0, 225.0])
    alive = ce.torus_survivors(theta, 2.0, 50)
    assert alive.shape == (2, 2)
    assert np.isnan(alive[0, 1]) and np.isnan(alive[1, 0])
    assert alive[0, 0] == 0 and alive[1, 1] == 0  # a token on itself has collapsed


def test_mask_matrices_titles_ticks_and_bare_axes():
    fig = plotting.mask_matrices({"causal": torch.ones(4, 4).tril().bool()})
    ax = fig.axes[0]
    assert ax.get_title() == "causal" and ax.get_ylabel() == "query $i$"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4"]
    bare = plotting.mask_matrices({"a": torch.eye(3).bool(), "b": torch.eye(3).bool()},
                                  token_labels=False, title_size=9)
    assert all(len(a.get_xticks()) == 0 for a in bare.axes)
    assert bare.axes[1].title.get_fontsize() == 9
    plt.close("all")


def test_mask_bands_labels_styles_and_lines():
    fig, ax = plt.subplots()
    lines = plotting.mask_bands(ax, {"dilated_global": np.ones((3, 2)), "causal": np.ones((3, 2))},
                                labels={"causal": "causal, $r = 1$"})
    assert lines["dilated_global"].get_linestyle() == "-."
    assert [line.get_label() for line in ax.get_lines()] == ["dilated + global", "causal, $r = 1$"]
    assert lines["causal"].get_color() == plotting.COLORS[1]
    plt.close(fig)


def test_distinct_style_and_percentile_band():
    assert plotting.distinct_style(17) == {"color": plotting.COLORS[1], "ls": "-."}
    fig, ax = plt.subplots()
    values = np.arange(20.0).reshape(2, 10)
    line = plotting.percentile_band(ax, [0, 1], values, color="k")
    assert line.get_ydata().tolist() == [4.5, 14.5]
    plt.close(fig)


def test_words_and_glue_math():
    assert tables.words([1, 2, 4]) == "1, 2 and 4" and tables.words(["a"]) == "a"
    tables.glue_math("key", 0.5, signed=True)  # outside a notebook: no error, nothing shown
