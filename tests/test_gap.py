import dataclasses
import math

import numpy as np
import pytest
import torch

from collapse import gap, markov, metrics, rng
from collapse.checks import ParameterError


@pytest.mark.parametrize("T, d", [(20, 20), (20, 100), (100, 20)])
def test_isometric_input_is_a_slice_of_an_orthogonal_matrix(T, d):
    X = gap.isometric_input(T, d, generator=torch.Generator().manual_seed(0))
    gram = X @ X.mT if d >= T else X.mT @ X
    torch.testing.assert_close(gram, torch.eye(min(T, d), dtype=torch.float64))
    assert metrics.stable_rank(X).item() == pytest.approx(min(T, d))


def test_keyquery_logit_scales():
    """Xavier logits have std ~1/d, N(0,1) logits std ~1, so A(X) ~ 11^T/T or
    Markov-like."""
    d = T = 200
    X = gap.isometric_input(T, d, generator=torch.Generator().manual_seed(1))
    for kind, expected in [("xavier", 1 / d), ("normal", 1.0)]:
        A = gap.attention_matrices(X, kind, torch.Generator().manual_seed(2))
        logits = A.log()
        spread = (logits - logits.mean(-1, keepdim=True)).std().item()
        assert spread == pytest.approx(expected, rel=0.1)
        torch.testing.assert_close(A.sum(-1), torch.ones(T, dtype=torch.float64))


def test_layer_variants_by_hand():
    g = torch.Generator().manual_seed(3)
    X, W = (
        torch.randn(6, 4, generator=g, dtype=torch.float64),
        torch.randn(4, 4, generator=g, dtype=torch.float64),
    )
    A = torch.softmax(torch.randn(6, 6, generator=g, dtype=torch.float64), -1)
    plain = gap.GapConfig(T=6, d=4, n_layers=1)
    torch.testing.assert_close(gap.gap_layer(X, A, W, plain), A @ X @ W)
    fixed = gap.GapConfig(T=6, d=4, n_layers=1, fix=True, skip=True, layernorm=True)
    expected = torch.nn.functional.layer_norm(X + (A - 1 / 6) @ X @ W, (4,), eps=1e-5)
    torch.testing.assert_close(gap.gap_layer(X, A, W, fixed), expected)


def test_seeds_batch_like_separate_runs_and_repeat_bit_for_bit():
    config = gap.GapConfig(T=30, d=30, n_layers=4, fix=True, skip=True)
    batched = gap.simulate(config, [3, 7], metrics=("stable_rank", "gram_stable_rank"))
    for i, seed in enumerate([3, 7]):
        alone = gap.simulate(config, seed, metrics=("stable_rank", "gram_stable_rank"))
        torch.testing.assert_close(
            batched["gram_stable_rank"][:, i], alone["gram_stable_rank"][:, 0], rtol=1e-10, atol=0
        )
    again = gap.simulate(config, [3, 7], metrics=("stable_rank", "gram_stable_rank"))
    assert torch.equal(batched["stable_rank"], again["stable_rank"])


def test_rank_collapse_in_width_and_its_fix():
    """One Markov layer: sr(XX^T) ~ 1 without the fix, grows with T with it."""
    plain = [
        gap.simulate(gap.GapConfig(T=T, d=T, n_layers=1), range(3))["gram_stable_rank"][1]
        .mean()
        .item()
        for T in (20, 80)
    ]
    fixed = [
        gap.simulate(gap.GapConfig(T=T, d=T, n_layers=1, fix=True), range(3))["gram_stable_rank"][
            1
        ]
        .mean()
        .item()
        for T in (20, 80)
    ]
    assert max(plain) < 1.2
    assert fixed[1] > 2 * fixed[0] > 2 * plain[0]
    assert math.isclose(
        gap.simulate(gap.GapConfig(T=20, d=20, n_layers=0), 0)["gram_stable_rank"][0, 0].item(), 20
    )


def test_labels_and_bad_inputs():
    assert (
        gap.GapConfig(T=4, d=4, n_layers=1, fix=True, skip=True, layernorm=True).label
        == "A⊥+skip+LN"
    )
    assert gap.GapConfig(T=4, d=4, n_layers=1, attention="identity").label == "Identity A"
    with pytest.raises(
        ParameterError, match="attention must be one of markov, identity, xavier, normal"
    ):
        gap.GapConfig(T=4, d=4, n_layers=1, attention="random")
    with pytest.raises(ParameterError, match="n_layers must be an int >= 0"):
        gap.GapConfig(T=4, d=4, n_layers=-3)
    with pytest.raises(ParameterError, match="seed must be an int >= 0 or a non-empty sequence"):
        gap.simulate(gap.GapConfig(T=4, d=4, n_layers=1), [])


# --- the batched engine, metrics, sweeps and limits (helper-m34) ----------------------


def test_simulate_many_equals_lone_runs_and_pairs_the_configurations():
    variants = gap.fig7_variants("markov") | {
        "A(X)⊥+skip": {"attention": "normal", "fix": True, "skip": True}
    }
    configs = [gap.GapConfig(T=16, d=24, n_layers=3, **kw) for kw in variants.values()]
    batched = gap.simulate_many(configs, [2, 9], metrics=("stable_rank", "gram_stable_rank", "mu"))
    assert batched["mu"].shape == (len(configs), 4, 2)
    for c, config in enumerate(configs):
        alone = gap.simulate(config, [2, 9], metrics=("stable_rank", "gram_stable_rank", "mu"))
        for name, value in alone.items():
            torch.testing.assert_close(batched[name][c], value, rtol=1e-12, atol=0)
    # one X_0 per seed for every configuration: the layer-0 values agree across configurations
    assert torch.equal(batched["mu"][:, 0], batched["mu"][:1, 0].expand(len(configs), 2))


def test_a_seed_does_not_depend_on_its_batch():
    configs = [
        gap.GapConfig(T=20, d=40, n_layers=4, fix=True),
        gap.GapConfig(T=20, d=40, n_layers=4, attention="identity"),
    ]
    together = gap.simulate_many(configs, [3, 7, 11], metrics=("gram_stable_rank",))[
        "gram_stable_rank"
    ]
    alone = gap.simulate_many(configs, [7], metrics=("gram_stable_rank",))["gram_stable_rank"]
    chunked = gap.simulate_many(configs, [3, 7, 11], metrics=("gram_stable_rank",), seed_batch=2)[
        "gram_stable_rank"
    ]
    torch.testing.assert_close(together[:, :, 1], alone[:, :, 0], rtol=1e-12, atol=0)
    torch.testing.assert_close(chunked, together, rtol=1e-12, atol=0)
    assert torch.equal(gap.simulate_many(configs, [3, 7, 11])["gram_stable_rank"], together)


@pytest.mark.parametrize("shape", [(3, 10, 30), (3, 30, 10)])
def test_gram_path_matches_the_svd_metrics(shape):
    X = torch.randn(
        *shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64
    ) * torch.tensor([1.0, 1e-3, 1e30]).view(3, 1, 1)
    got = gap._evaluate(X, ("stable_rank", "gram_stable_rank", "mu"))
    torch.testing.assert_close(got["stable_rank"], metrics.stable_rank(X), rtol=1e-10, atol=0)
    torch.testing.assert_close(
        got["gram_stable_rank"], metrics.gram_stable_rank(X), rtol=1e-10, atol=0
    )
    torch.testing.assert_close(got["mu"], metrics.mu(X))
    zero = gap._evaluate(torch.zeros(2, 5, 5, dtype=torch.float64), ("gram_stable_rank",))[
        "gram_stable_rank"
    ]
    assert torch.isnan(zero).all()


def test_official_metric_overflows_in_float32_only():
    X = torch.randn(2, 20, 20, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    torch.testing.assert_close(
        gap.official_gram_stable_rank(X), metrics.gram_stable_rank(X), rtol=1e-10, atol=0
    )
    big = (X * 1e10).float()  # sigma_1^4 ~ 1e42 > float32's 3.4e38
    assert torch.isnan(gap.official_gram_stable_rank(big)).all()
    assert torch.isfinite(gap._evaluate(big, ("gram_stable_rank",))["gram_stable_rank"]).all()


def test_float32_identity_stack_loses_the_official_metric_after_depth_8():
    """At T = d = 150 the N(0, 1) weights grow X ~12x per layer; sigma^4 passes float32's range
    at depth 9."""
    config = gap.GapConfig(T=150, d=150, n_layers=10, attention="identity")
    names = ("gram_stable_rank", "official_gram_stable_rank")
    single = gap.simulate(config, [0, 1], metrics=names, dtype=torch.float32)
    double = gap.simulate(config, [0, 1], metrics=names)
    assert torch.isfinite(single["official_gram_stable_rank"][:9]).all()
    assert torch.isnan(single["official_gram_stable_rank"][9:]).all()
    assert torch.isfinite(double["official_gram_stable_rank"]).all()
    torch.testing.assert_close(
        single["gram_stable_rank"], double["gram_stable_rank"], rtol=1e-3, atol=0
    )


def test_width_sweep_grid_is_finite_and_complete():
    variants = gap.fig7_variants("markov")
    assert list(variants) == [
        "A",
        "A+LN",
        "A+skip",
        "A+skip+LN",
        "A⊥",
        "A⊥+LN",
        "A⊥+skip",
        "A⊥+skip+LN",
        "Identity A",
    ]
    frame = gap.width_sweep(
        variants,
        [8, 12],
        [1.0, 0.5, 0.2],
        n_layers=3,
        seeds=[0, 1],
        metrics=("stable_rank", "gram_stable_rank"),
        max_width=50,
    )
    assert sorted(set(zip(frame["gamma"], frame["T"], frame["d"], strict=True))) == [
        (0.2, 8, 40),
        (0.5, 8, 16),
        (0.5, 12, 24),
        (1.0, 8, 8),
        (1.0, 12, 12),
    ]
    assert len(frame) == 5 * 9 * 4 * 2
    assert np.isfinite(frame[["stable_rank", "gram_stable_rank"]].to_numpy()).all()
    one = frame[
        (frame["variant"] == "A⊥")
        & (frame["T"] == 12)
        & (frame["gamma"] == 0.5)
        & (frame["seed"] == 1)
    ]
    alone = gap.simulate(gap.GapConfig(T=12, d=24, n_layers=3, fix=True), 1)["gram_stable_rank"][
        :, 0
    ]
    np.testing.assert_allclose(
        one.sort_values("layer")["gram_stable_rank"], alone.numpy(), rtol=1e-12
    )
    assert gap.width_sweep_flops(variants, [8, 12], [1.0], n_layers=3, n_seeds=2) > 0


def test_width_and_inputs_are_checked():
    assert gap.width_for(150, 0.2) == 750 and gap.width_for(60, 0.5) == 120
    with pytest.raises(ParameterError, match="gamma must be in"):
        gap.width_for(10, 2.0)
    with pytest.raises(ParameterError, match="gamma must be a number > 0"):
        gap.width_for(10, 0.0)
    with pytest.raises(ParameterError, match="configs must share T, d and n_layers"):
        gap.simulate_many(
            [gap.GapConfig(T=4, d=4, n_layers=1), gap.GapConfig(T=5, d=5, n_layers=1)]
        )
    with pytest.raises(ParameterError, match="metric must be one of"):
        gap.simulate(gap.GapConfig(T=4, d=4, n_layers=1), 0, metrics=("rank",))
    with pytest.raises(ParameterError, match="dtype must be"):
        gap.simulate(gap.GapConfig(T=4, d=4, n_layers=1), 0, dtype=torch.float16)


def test_first_layer_is_the_layer_simulate_ran():
    config = gap.GapConfig(T=30, d=60, n_layers=1, attention="xavier", fix=True, skip=True)
    parts = gap.first_layer(config, [4, 6])
    torch.testing.assert_close(parts["A"].sum(-1), torch.ones(2, 30, dtype=torch.float64))
    ran = gap.simulate(config, [4, 6], metrics=("stable_rank",))["stable_rank"][1]
    torch.testing.assert_close(metrics.stable_rank(parts["X1"]), ran, rtol=1e-10, atol=0)
    # the Xavier trap: the fixed attention branch is tiny next to the skip
    branch = parts["X1"] - parts["X0"]
    assert (metrics.frobenius(branch) / metrics.frobenius(parts["X0"])).max() < 0.1


def test_free_product_edge_against_gaussian_matrices():
    assert gap.free_product_edge(0.0) == pytest.approx(4.0)
    assert gap.free_product_edge(1.0) == pytest.approx(27 / 4)
    g = torch.Generator().manual_seed(6)
    for gamma in (1.0, 0.25):
        T = 400
        d = int(T / gamma)
        X = (torch.randn(T, T, generator=g, dtype=torch.float64) / math.sqrt(T)) @ (
            torch.randn(T, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        )
        lam = torch.linalg.eigvalsh(X @ X.T)
        assert lam.mean().item() == pytest.approx(1.0, rel=0.05)
        assert (lam**2).mean().item() == pytest.approx(2 + gamma, rel=0.08)
        assert lam.max().item() == pytest.approx(gap.free_product_edge(gamma), rel=0.05)
    limits = gap.layer1_limits(1.0)
    assert limits["identity"]["stable_rank"] == pytest.approx(0.25) and limits["identity"][
        "gram_stable_rank"
    ] == pytest.approx(0.125)


# --- the implicit-fix maps in the stack ------------------------------------------------


def test_maps_of_a_markov_layer_by_hand():
    """Layer 1's maps from the seed's own streams: X_0, then the logits G and W (stream 0);
    differential's second matrix from stream 1."""
    T, d, seed = 10, 12, 5
    g = rng.generator(seed, 0)
    torch.randn(12, 12, generator=g, dtype=torch.float64)  # X_0
    G = markov.random_logits(T, generator=g)
    A2 = markov.random_markov(T, generator=rng.generator(seed, 1))
    expected = {
        "softmax": torch.softmax(G, -1),
        "centred": torch.softmax(G, -1) - 1 / T,
        "differential": torch.softmax(G, -1) - 0.3 * A2,
        "sigmoid": torch.sigmoid(G - math.log(T)),
    }
    for name, want in expected.items():
        lam = 0.3 if name == "differential" else None
        config = gap.GapConfig(T=T, d=d, n_layers=1, map=name, lam=lam)
        torch.testing.assert_close(gap.first_layer(config, seed)["A"][0], want)
        torch.testing.assert_close(gap.first_maps([config], seed)[0], want)
    schedule = gap.GapConfig(T=T, d=d, n_layers=1, map="differential")
    assert schedule.layer_lambda(1) == pytest.approx(0.2) and schedule.layer_lambda(20) > 0.79
    torch.testing.assert_close(
        gap.first_layer(schedule, seed)["A"][0], torch.softmax(G, -1) - 0.2 * A2
    )


def test_keyquery_differential_uses_the_halves_of_the_weights():
    config = gap.GapConfig(T=6, d=8, n_layers=1, attention="normal", map="differential", lam=0.5)
    first = gap.first_layer(config, 1)
    X, sigmoid = first["X0"][0], gap.GapConfig(T=6, d=8, n_layers=1, attention="normal")
    g = rng.generator(1, 0)
    gap.isometric_input(6, 8, generator=g)
    W_Q, W_K = (torch.randn(8, 8, generator=g, dtype=torch.float64) for _ in range(2))
    half = [
        (X @ W_Q[:, h] @ (X @ W_K[:, h]).T / 2).softmax(-1) for h in (slice(0, 4), slice(4, 8))
    ]
    torch.testing.assert_close(first["A"][0], half[0] - 0.5 * half[1])
    S = X @ W_Q @ (X @ W_K).T / math.sqrt(8)
    sig = gap.first_layer(dataclasses.replace(sigmoid, map="sigmoid"), 1)["A"][0]
    torch.testing.assert_close(sig, torch.sigmoid(S - math.log(6)))


def test_maps_do_not_move_each_other_and_are_checked():
    maps = [
        gap.GapConfig(T=12, d=12, n_layers=3, map=m, skip=True)
        for m in ("softmax", "differential", "sigmoid", "centred")
    ]
    together = gap.simulate_many(maps, [1, 4])["gram_stable_rank"]
    for c, config in enumerate(maps):
        alone = gap.simulate(config, [1, 4])["gram_stable_rank"]
        torch.testing.assert_close(together[c], alone, rtol=1e-12, atol=0)
    plain = gap.simulate(gap.GapConfig(T=12, d=12, n_layers=3, skip=True), [1, 4])
    assert torch.equal(together[0], plain["gram_stable_rank"])
    torch.testing.assert_close(  # centred attention is the fix, layer after layer
        together[3],
        gap.simulate(gap.GapConfig(T=12, d=12, n_layers=3, skip=True, fix=True), [1, 4])[
            "gram_stable_rank"
        ],
    )
    assert maps[1].label == "A diff+skip"
    assert (
        gap.GapConfig(T=4, d=4, n_layers=1, map="differential", lam=0.8).label == "A diff(λ=0.8)"
    )
    for bad, message in [
        ({"map": "linear"}, "map must be one of softmax, centred, differential, sigmoid"),
        ({"map": "centred", "fix": True}, "fix applies to the softmax map only"),
        ({"lam": 0.5}, "lam applies to map='differential' only"),
        ({"map": "sigmoid", "attention": "identity"}, "map must be softmax for identity"),
        ({"map": "differential", "attention": "normal", "d": 5}, "d must be even"),
    ]:
        with pytest.raises(ParameterError, match=message):
            gap.GapConfig(**({"T": 4, "d": 4, "n_layers": 1} | bad))
