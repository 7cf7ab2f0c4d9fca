"""The presentation helpers of the SAN chapters (07-12): layer axes, bands per mask and
temperature, mask tables, the readings of a sweep's frame and the pretrained sweep."""

import doctest
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from scipy import stats  # noqa: E402

from collapse import analysis, inputs, masks, plotting, pretrained, san, tables, workloads  # noqa: E402

NEW = [
    plotting.layer_ticks,
    plotting.layer_axis,
    plotting.mask_bands,
    plotting.mask_lines,
    plotting.loglog_panel,
    plotting.temperature_bands,
    tables.fraction,
    tables.by_mask,
    analysis.curves_by,
    analysis.temperature_effect,
    analysis.relative_range,
    analysis.summary_by,
    analysis.mean_interval,
    inputs.gaussian_inputs,
    san.bert_variants,
]


@pytest.fixture(autouse=True)
def _style():
    plotting.use_style()
    yield
    plt.close("all")


@pytest.mark.parametrize("function", NEW, ids=lambda f: f.__qualname__)
def test_docstring_examples_hold(function):
    module = __import__(function.__module__, fromlist=["_"])
    finder = doctest.DocTestFinder()
    [test] = [t for t in finder.find(function, globs=vars(module).copy()) if t.examples]
    result = doctest.DocTestRunner().run(test)
    assert result.failed == 0


def _frame(masks_, temps, layers, samples=2, slope=None):
    """A sweep-shaped frame: mu = exp(-slope(mask, d_qk) * layer) per sample."""
    rows = []
    for m in masks_:
        for d_qk in temps:
            for sample in range(samples):
                for t in range(layers + 1):
                    rate = slope(m, d_qk) if slope else 1.0
                    rows.append({"config": "san", "mask": m, "d_qk": d_qk, "seed": 0,
                                 "sample": sample, "layer": t, "mu": np.exp(-rate * t)})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("depth", [6, 12, 32, 36, 128, 1000])
@pytest.mark.parametrize("width", [1.0, 1.4, 2.0, 6.0])
def test_layer_ticks_leave_room_for_every_label(depth, width):
    ticks = plotting.layer_ticks(depth, width)
    assert ticks[0] == 1 and ticks[-1] == depth and ticks == sorted(set(ticks))
    octave = width / max(np.log2(depth), 1.0)
    for a, b in zip(ticks, ticks[1:], strict=False):
        gap = np.log2(b / a) * octave  # inches between the two labels' centres
        room = (plotting._label_inches(str(a)) + plotting._label_inches(str(b))) / 2
        assert gap >= room, (a, b)


def test_layer_axis_drops_64_next_to_128_three_panels_to_a_row():
    fig, axes = plotting.panels(6, height=2.3)  # chapter 08's figure of the deep stacks
    plotting.layer_axis(axes[0], 128)
    assert [int(t) for t in axes[0].get_xticks()] == [1, 4, 16, 128]


def _overlaps(ax):
    """Pairs of neighbouring x tick labels whose drawn boxes overlap."""
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    boxes = sorted(
        (label.get_window_extent(renderer) for label in ax.get_xticklabels()
         if label.get_text() and label.get_visible()),
        key=lambda box: box.x0,
    )
    return [(a, b) for a, b in zip(boxes, boxes[1:], strict=False) if a.x1 > b.x0]


@pytest.mark.parametrize("ncols, depth", [(3, 128), (3, 12), (2, 128), (2, 6)])
def test_layer_axis_labels_never_collide_at_the_book_width(ncols, depth):
    fig, axes = plotting.panels(ncols, height=2.3, ncols=ncols)  # one row of the book's grid
    for ax in axes:
        ax.plot(np.arange(1, depth + 1), np.exp(-np.arange(depth)))
        ax.set_ylabel("mu")
        plotting.layer_axis(ax, depth)
    assert [int(t) for t in axes[0].get_xticks()][-1] == depth
    assert all(not _overlaps(ax) for ax in axes)


def test_layer_axis_without_depth_is_linear_with_integer_ticks():
    fig, ax = plt.subplots()
    ax.plot(np.arange(13), np.arange(13))
    plotting.layer_axis(ax, label=None)
    assert ax.get_xscale() == "linear" and ax.get_xlabel() == ""
    assert all(float(t).is_integer() for t in ax.get_xticks())


def test_mask_bands_use_the_mask_colours_and_start_at_first():
    fig, ax = plt.subplots()
    curves = {"complete": np.full((5, 2), 2.0), "causal": np.full((5, 2), 3.0)}
    plotting.mask_bands(ax, curves, first=1)
    lines = ax.get_lines()
    assert [line.get_color() for line in lines] == [plotting.color_for(m) for m in curves]
    assert lines[0].get_xdata().tolist() == [1, 2, 3, 4]
    assert np.allclose(lines[1].get_ydata(), 3.0)
    plotting.mask_bands(ax, curves, legend=False)
    assert ax.get_lines()[-1].get_label().startswith("_")


def test_loglog_panel_draws_mu0_with_a_decade_either_side():
    fig, ax = plt.subplots()
    flat = np.full((13, 3), 5.0)
    plotting.loglog_panel(ax, {"complete": flat, "causal": flat}, title="SAN")
    mu0 = [line for line in ax.get_lines() if line.get_label() == r"$\mu(X^{(0)})$"]
    assert len(mu0) == 1 and np.allclose(mu0[0].get_ydata(), 5.0)
    low, high = ax.get_ylim()
    assert low <= 0.5 + 1e-9 and high >= 50 - 1e-9 and ax.get_title() == "SAN"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_temperature_bands_go_cold_to_hot():
    fig, ax = plt.subplots()
    plotting.temperature_bands(ax, {t: np.ones((3, 2)) for t in (1 / 64, 1.0, 64.0)})
    colors = [line.get_color() for line in ax.get_lines()]
    assert colors == [plotting.temperature_color(i, 3) for i in range(3)]
    assert colors[0] != colors[-1]


def test_mask_lines_plot_each_column_against_the_layers():
    fig, ax = plt.subplots()
    table = pd.DataFrame({"complete": [0.0, 2.0], "causal": [1.0, 1.5]}, index=[1, 2])
    plotting.mask_lines(ax, table, legend=False)
    first = ax.get_lines()[0]
    assert first.get_xdata().tolist() == [1, 2] and first.get_label().startswith("_")


def test_fraction_reads_like_the_text():
    assert [tables.fraction(v) for v in (1 / 64, 0.25, 1.0, 32.0)] == ["1/64", "1/4", "1", "32"]


def test_by_mask_orders_masks_and_splits_tuple_keys():
    rows = {("pretrained", "+LN"): pd.Series({"causal": 1.0, "complete": 2.0})}
    frame = tables.by_mask(rows, ["complete", "causal"], names=["Weights", "Variant"])
    assert list(frame.columns) == ["Weights", "Variant", "complete", "causal"]
    assert frame.iloc[0].tolist() == ["pretrained", "+LN", 2.0, 1.0]
    with pytest.raises(ValueError):
        tables.by_mask({("a", "b"): {}}, ["complete"], names=["only one"])


def test_curves_by_equals_curves_per_value():
    frame = _frame(["complete", "causal"], [1.0, 64.0], 3, slope=lambda m, t: t)
    found = analysis.curves_by(frame, "d_qk", [1.0, 64.0], mask="causal")
    assert np.array_equal(found[64.0], analysis.curves(frame, mask="causal", d_qk=64.0))
    assert np.allclose(found[1.0][:, 0], np.exp(-np.arange(4)))


def test_temperature_effect_is_the_gap_of_mean_log_mu():
    frame = _frame(["complete", "causal"], [1 / 64, 64.0], 4,
                   slope=lambda m, t: (2.0 if m == "complete" else 1.0) * (t > 1))
    effect = analysis.temperature_effect(frame, 1 / 64, 64.0)
    assert list(effect.index) == [0, 1, 2, 3, 4]
    assert np.allclose(effect["complete"], 2.0 * np.arange(5))
    assert np.allclose(effect["causal"], np.arange(5))


def test_relative_range_is_scale_free():
    table = pd.DataFrame({"a": [-1.0, 2.0], "b": [-1.1, 2.2]})
    assert np.allclose(analysis.relative_range(table), analysis.relative_range(10 * table))


def test_summary_by_summarises_each_network_alone():
    base = _frame(["causal"], [64.0], 2)
    frame = pd.concat([base.assign(seed=s, mu=base["mu"] ** (s + 1)) for s in range(3)])
    per_net = analysis.summary_by(frame, "seed")
    assert per_net.index.names == ["seed", "config", "mask", "d_qk"]
    assert np.allclose(per_net["delta"], [-2.0, -4.0, -6.0])


def test_mean_interval_is_students_t_over_the_finite_values():
    values = [0.3, 0.1, -0.2, 0.4, np.inf]
    mean, (low, high) = analysis.mean_interval(values)
    finite = np.array(values[:4])
    low_t, high_t = stats.t.interval(0.95, 3, loc=finite.mean(), scale=stats.sem(finite))
    assert mean == pytest.approx(finite.mean()) and (low, high) == pytest.approx((low_t, high_t))


def test_gaussian_inputs_are_seeded_with_rows_of_norm_about_one():
    X = inputs.gaussian_inputs(4, 64, 256, seed=3)
    assert torch.equal(X, inputs.gaussian_inputs(4, 64, 256, seed=3))
    assert not torch.equal(X, inputs.gaussian_inputs(4, 64, 256, seed=4))
    assert X.norm(dim=-1).mean().item() == pytest.approx(1.0, abs=0.05)


def test_bert_variants_share_their_weights():
    stacks = san.bert_variants(3, 32, 2, init="bert_normal")
    assert list(stacks) == list(san.VARIANTS)
    assert {c.init for c in stacks.values()} == {"bert_normal"}
    first = [san.init_layer(c, 0, seed=0).W_Q for c in stacks.values()]
    assert all(torch.equal(first[0], w) for w in first)


def _tiny_model():
    config = san.SANConfig.bert(variant="full", n_layers=2, d=8, n_heads=2, d_ff=16)
    return pretrained.PretrainedModel(
        name="tiny", family="bert", path=Path("."), config=config,
        layers=list(san.init_layers(config, seed=0)), embeddings={}, tokenizer=None,
        max_positions=16,
    )


@pytest.mark.parametrize("d_qk", [None, [0.5, 4.0]])
def test_pretrained_sweep_is_simulate_per_mask_and_temperature(d_qk):
    model = _tiny_model()
    X = inputs.gaussian_inputs(3, 6, 8, seed=1)
    grid = {m: masks.make(m, 6) for m in ("complete", "causal")}
    frame = pretrained.sweep(model, X, "ln", grid, d_qk=d_qk, metrics=("mu", "frobenius"),
                             batch_size=2)
    temps = [float(model.config.head_dim)] if d_qk is None else d_qk
    assert len(frame) == 3 * 2 * len(temps) * 3
    for m, mask in grid.items():
        for temp in temps:
            alone = model.simulate(X, "ln", mask=mask, d_qk=None if d_qk is None else temp)
            got = analysis.curves(frame, mask=m, d_qk=temp)
            torch.testing.assert_close(torch.tensor(got), alone["mu"], rtol=1e-9, atol=1e-14)


def test_workloads_of_the_san_chapters_are_registered():
    assert {"temperature", "variants", "pretrained", "token-geometry",
            "open-questions", "layernorm-discontinuity"} <= set(workloads.slugs())
    small = dict(toy_n=8, toy_layers=8, toy_seeds=1, n_tokens=8, d=16, n_heads=2, n_layers=8,
                 n_samples=1, d_qk_values=[1.0], batch_size=0)
    twice = workloads.of("temperature", {**small, "d_qk_values": [1.0, 2.0]})
    once = workloads.of("temperature", small)
    assert twice.flops == pytest.approx(2 * once.flops)
