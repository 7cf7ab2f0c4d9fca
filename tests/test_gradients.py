import math

import numpy as np
import pandas as pd
import pytest
import torch

from collapse import fit, gap, gradients, metrics, runtime
from collapse.checks import ParameterError

runtime.use_threads(1)


def rel(a, b):
    return ((a - b).abs() / b.abs()).max().item()


@pytest.mark.parametrize("fix", [False, True])
@pytest.mark.parametrize("skip", [False, True])
def test_closed_forms_match_the_materialised_jacobian(fix, skip):
    """The structured forms agree with full autograd to 1e-8 relative, at every
    depth."""
    config = gap.GapConfig(T=7, d=5, n_layers=4, fix=fix, skip=skip)
    net = gradients.draw(config, [0, 1])
    closed = gradients.closed_form_skip(net) if skip else gradients.closed_form_plain(net)
    reference = torch.stack([gradients.jacobian_norm(net, L) for L in range(1, 5)])
    assert closed.shape == (4, 2)
    assert rel(closed, reference) < 1e-8


@pytest.mark.parametrize("attention", ["markov", "xavier", "normal"])
@pytest.mark.parametrize(
    "skip, layernorm", [(False, False), (True, False), (False, True), (True, True)]
)
def test_chunked_vjp_matches_the_materialised_jacobian(attention, skip, layernorm):
    config = gap.GapConfig(
        T=6, d=4, n_layers=3, attention=attention, fix=True, skip=skip, layernorm=layernorm
    )
    net = gradients.draw(config, [2, 3])
    for L in (1, 3):
        # a chunk that does not divide T*d = 24 exercises the last, partial chunk
        assert (
            rel(gradients.autograd_norm(net, L, chunk=5), gradients.jacobian_norm(net, L)) < 1e-10
        )


def test_plain_closed_form_by_hand():
    """||A2 A1 X0||^2 ||W2||^2 at depth 2, from the stored matrices."""
    net = gradients.draw(gap.GapConfig(T=5, d=5, n_layers=2, fix=True), 4)
    A1, A2 = (a[0] - 1 / 5 for a in net.A)
    expected = (A2 @ A1 @ net.X0[0]).square().sum() * net.W[1][0].square().sum()
    assert gradients.closed_form_plain(net)[1, 0].item() == pytest.approx(
        expected.item(), rel=1e-12
    )


def test_skip_expansion_has_more_terms_than_the_plain_product():
    """With skip, the subset S = {2..L} is the plain term; the other subsets add to it (positive
    Gram sum)."""
    plain = gradients.draw(gap.GapConfig(T=8, d=8, n_layers=3), range(3))
    skip = gradients.draw(gap.GapConfig(T=8, d=8, n_layers=3, skip=True), range(3))
    # same draws: the skip flag changes the forward pass but not what is drawn for Markov attention
    for a, b in zip(plain.A, skip.A, strict=True):
        assert torch.equal(a, b)
    assert (gradients.closed_form_skip(skip) > 0).all()
    assert not torch.allclose(gradients.closed_form_skip(skip), gradients.closed_form_plain(plain))


def test_networks_are_those_of_gap_simulate():
    """The same seed gives the same network as gap.simulate (so gradients and stable ranks
    agree)."""
    for attention in ("markov", "normal"):
        config = gap.GapConfig(T=10, d=10, n_layers=3, attention=attention, fix=True, skip=True)
        net = gradients.draw(config, [3, 4])
        X = gradients.forward(net, net.W[0])
        simulated = gap.simulate(config, [3, 4], metrics=("gram_stable_rank",))[
            "gram_stable_rank"
        ][-1]
        torch.testing.assert_close(metrics.gram_stable_rank(X), simulated, rtol=1e-12, atol=0)


def test_networks_are_the_draws_of_gap_simulate():
    """One draw path: X_0, A_1 and W_1 of gradients.draw are those of gap.first_layer."""
    for kind in ("markov", "xavier", "normal"):
        config = gap.GapConfig(T=9, d=9, n_layers=2, attention=kind)
        net, first = gradients.draw(config, [5, 6]), gap.first_layer(config, [5, 6])
        assert torch.equal(net.X0, first["X0"]) and torch.equal(net.W[0], first["W"])
        if kind == "markov":
            assert torch.equal(net.A[0], first["A"])
        else:  # one seed at a time against a batch of seeds: BLAS rounding, on entries <= 1
            torch.testing.assert_close(net.A[0], first["A"], rtol=0, atol=1e-14)
            torch.testing.assert_close(net.attention(0, net.X0), net.A[0], rtol=0, atol=1e-14)


def test_depth_prefixes_and_exact_norms_dispatch():
    net = gradients.draw(gap.GapConfig(T=6, d=6, n_layers=3, skip=True), [0])
    every = gradients.exact_norms(net)
    assert every.shape == (3, 1)
    torch.testing.assert_close(gradients.exact_norms(net, [2]), every[1:2])
    shallow = gradients.draw(gap.GapConfig(T=6, d=6, n_layers=2, skip=True), [0])
    torch.testing.assert_close(gradients.exact_norms(shallow), every[:2], rtol=1e-12, atol=0)
    ln = gradients.draw(gap.GapConfig(T=6, d=6, n_layers=2, layernorm=True), [0])
    assert rel(gradients.exact_norms(ln, [2])[0], gradients.jacobian_norm(ln, 2)) < 1e-10


def test_markov_slopes_without_and_with_the_fix():
    """At L = 2, slope ~1.9 without the fix and lower with it, level lower by > 2
    nats."""
    Ts = [10, 20, 40]
    logs = {}
    for fix in (False, True):
        nets = [gradients.draw(gap.GapConfig(T=T, d=T, n_layers=2, fix=fix), range(5)) for T in Ts]
        logs[fix] = np.array(
            [gradients.exact_norms(net, [2])[0].log().mean().item() for net in nets]
        )
    slope_plain = fit.loglog_fit(Ts, np.exp(logs[False])).slope
    slope_fixed = fit.loglog_fit(Ts, np.exp(logs[True])).slope
    assert slope_plain > 1.7 and slope_plain - slope_fixed > 0.2
    assert (logs[False] - logs[True] > 2).all()


def test_frozen_attention_separates_the_value_path():
    """For key-query A(X), holding A at its forward values gives the Markov closed form's
    value-path norm."""
    net = gradients.draw(gap.GapConfig(T=6, d=6, n_layers=2, attention="normal", fix=True), [0, 1])
    frozen = gradients.frozen_attention(net)
    assert frozen.QK is None and frozen.config.attention == "markov"
    assert rel(gradients.exact_norms(frozen, [2])[0], gradients.jacobian_norm(frozen, 2)) < 1e-10
    # with the attention path included, the norm differs
    assert rel(gradients.exact_norms(net, [2])[0], gradients.exact_norms(frozen, [2])[0]) > 1e-3


def test_bad_inputs():
    net = gradients.draw(gap.GapConfig(T=4, d=4, n_layers=2, layernorm=True), 0)
    with pytest.raises(
        ParameterError, match="needs Markov or identity attention, no LayerNorm and skip=False"
    ):
        gradients.closed_form_plain(net)
    with pytest.raises(ParameterError, match="depth must be at most the network's 2 layers"):
        gradients.autograd_norm(net, 3)
    with pytest.raises(ParameterError, match="seed must be an int >= 0 or a non-empty sequence"):
        gradients.draw(gap.GapConfig(T=4, d=4, n_layers=1), [])
    with pytest.raises(ParameterError, match="chunk must be an int >= 1"):
        gradients.autograd_norm(net, 1, chunk=0)


def test_norm_grid_and_fit_table():
    frame = gradients.norm_grid(["markov", "xavier"], ["plain", "ln"], [6, 12], [1, 2], [0, 1])
    assert len(frame) == 2 * 2 * 2 * 2 * 2 * 2
    assert set(frame["method"]) == {"closed form", "autograd"}
    row = frame.query(
        "kind == 'markov' and variant == 'plain' and fix and T == 12 and L == 2 and seed == 1"
    )
    net = gradients.draw(gap.GapConfig(T=12, d=12, n_layers=2, fix=True), [0, 1])
    assert row["norm"].item() == pytest.approx(
        gradients.closed_form_plain(net)[1, 1].item(), rel=1e-12
    )
    table = gradients.fit_table(frame)
    assert list(table.columns) == ["slope", "n_zero", "log T=6", "log T=12"]
    key = ("markov", "plain", True, 2)
    means = (
        frame.query("kind == 'markov' and variant == 'plain' and fix and L == 2")
        .groupby("T")["log_norm"]
        .mean()
    )
    assert table.loc[key, "slope"] == pytest.approx((means[12] - means[6]) / math.log(2))
    assert (table["n_zero"] == 0).all()


@pytest.mark.parametrize("map_, kind", [("differential", "markov"), ("sigmoid", "normal")])
def test_maps_through_the_gradient_paths(map_, kind):
    """Networks with an implicit-fix map: the closed form (Markov) and the vjp (key-query)
    match the materialised Jacobian, and norm_grid carries the map."""
    config = gap.GapConfig(T=6, d=6, n_layers=3, attention=kind, map=map_)
    net = gradients.draw(config, [0, 1])
    torch.testing.assert_close(
        net.attention(0, net.X0), gap.first_layer(config, [0, 1])["A"], rtol=1e-12, atol=0
    )
    reference = torch.stack([gradients.jacobian_norm(net, L) for L in (1, 3)])
    assert rel(gradients.exact_norms(net, [1, 3]), reference) < 1e-8
    grid = gradients.norm_grid([kind], ["plain"], [6, 8], [2], [0], fixes=(False,), map=map_)
    assert len(grid) == 2 and np.isfinite(grid["log_norm"]).all()


def test_fix_effect_is_the_paired_per_seed_slopes():
    """The mean per-seed slope is fit_table's slope; the drop and the level drop are paired
    over seeds, with a Student-t interval around the mean."""
    frame = gradients.norm_grid(["markov"], ["plain", "skip"], [6, 9, 12], [2], [0, 1, 2])
    effect = gradients.fix_effect(frame)
    fits = gradients.fit_table(frame)
    assert list(effect.index) == [("markov", "plain", 2), ("markov", "skip", 2)]
    for variant in ("plain", "skip"):
        row = effect.loc[("markov", variant, 2)]
        without, with_fix = (fits.loc[("markov", variant, f, 2), "slope"] for f in (False, True))
        assert row["slope"] == pytest.approx(without, rel=1e-10)
        assert row["drop"] == pytest.approx(without - with_fix, rel=1e-10)
        assert row["slope low"] < row["slope"] < row["slope high"]
        assert row["drop low"] < row["drop"] < row["drop high"]
        levels = fits.loc[("markov", variant, False, 2)] - fits.loc[("markov", variant, True, 2)]
        assert row["level drop"] == pytest.approx(levels.filter(like="log T=").min())
        assert row["n_seeds"] == 3
    # by hand: the drop's interval is the t interval of the three seeds' drops
    logs = frame.query("variant == 'plain'").pivot_table(
        index="seed", columns=["fix", "T"], values="log_norm"
    )
    x = np.log([6.0, 9.0, 12.0])
    drops = (
        np.polyfit(x, logs[False].to_numpy().T, 1)[0]
        - np.polyfit(x, logs[True].to_numpy().T, 1)[0]
    )
    half = 4.302652729911275 * drops.std(ddof=1) / math.sqrt(3)  # t(0.975, 2 dof)
    row = effect.loc[("markov", "plain", 2)]
    assert (row["drop low"], row["drop high"]) == pytest.approx(
        (drops.mean() - half, drops.mean() + half)
    )
    with pytest.raises(ParameterError, match="with and without the fix"):
        gradients.fix_effect(frame[~frame["fix"]])


def test_exactness_is_the_gap_to_the_whole_jacobian_and_named_rows_read_as_the_page():
    config = gap.GapConfig(T=5, d=5, n_layers=2, attention="normal", skip=True)
    assert gradients.exactness(config, [0, 1]) < 1e-10
    table = pd.DataFrame({"kind": ["markov"], "variant": ["skip"], "fix": [True], "slope": [1.0]})
    rows = gradients.named(table.set_index(["kind", "variant", "fix"]))
    names = rows.loc[0, ["attention", "configuration"]].tolist()
    assert names == ["Markov $A$", r"$A^\perp$+skip"]
