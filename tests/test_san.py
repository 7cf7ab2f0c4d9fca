import math
from dataclasses import replace

import pandas as pd
import pytest
import torch
from numerics import assert_close_to_scale

from collapse import attention, chunks, inputs, masks, metrics, rng, san, sweep
from collapse.book import executors
from collapse.checks import ParameterError


def reference_attention(X, w, n_heads, mask=None, d_qk=None):
    """Loop over heads, one plain formula per head: the definition SA is checked against."""
    d = X.shape[-1]
    head = d // n_heads
    outputs = []
    for h in range(n_heads):
        cols = slice(h * head, (h + 1) * head)
        Q = X @ w.W_Q[:, cols] + (0 if w.b_Q is None else w.b_Q[cols])
        K = X @ w.W_K[:, cols] + (0 if w.b_K is None else w.b_K[cols])
        V = X @ w.W_V[:, cols] + (0 if w.b_V is None else w.b_V[cols])
        A = attention.masked_softmax(Q @ K.transpose(-1, -2) / math.sqrt(d_qk or head), mask)
        outputs.append(A @ V)
    out = torch.cat(outputs, dim=-1)
    return out if w.W_O is None else out @ w.W_O + w.b_O


def test_single_head_toy_layer_is_A_X_WV(gen):
    config = san.SANConfig(d=6, n_layers=1)
    w = san.init_layer(config, 0, seed=3)
    X = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    mask = masks.make("causal", 5)
    A = attention.attention_matrix(X, w.W_Q, w.W_K, mask, d_qk=2.0)
    out, A_layer = san.apply_layer(X, w, config, mask, scale=2.0**0.5)
    torch.testing.assert_close(out, A @ X @ w.W_V)
    torch.testing.assert_close(A_layer[..., 0, :, :], A)


@pytest.mark.parametrize("variant", san.VARIANTS)
def test_bert_sized_variants_match_the_reference_formulas(variant, gen):
    config = san.SANConfig.bert(variant=variant, n_layers=1, d=24, n_heads=3, d_ff=40)
    w = san.init_layer(config, 0, seed=7)
    X = torch.randn(2, 9, 24, generator=gen, dtype=torch.float64)
    mask = masks.make("sliding_window", 9, window=2)
    sa = reference_attention(X, w, 3, mask)
    ln = lambda Y: torch.nn.functional.layer_norm(Y, (24,), eps=1e-12)  # noqa: E731
    h = ln(X + sa)
    expected = {
        "attention": lambda: sa,
        "skip": lambda: X + sa,
        "ln": lambda: ln(sa),
        "skip_ln": lambda: h,
        "full": lambda: ln(h + torch.nn.functional.gelu(h @ w.W_1 + w.b_1) @ w.W_2 + w.b_2),
    }[variant]()
    torch.testing.assert_close(san.apply_layer(X, w, config, mask)[0], expected)


def test_scale_only_layernorm_keeps_tokens_on_the_sphere(gen):
    config = san.SANConfig(d=8, n_layers=5, variant="ln", init="orthogonal_v")
    X0 = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    final = san.simulate(X0, config, mask=masks.make("causal", 4)).final
    torch.testing.assert_close(
        torch.linalg.vector_norm(final, dim=-1), torch.ones(4, dtype=torch.float64)
    )


def test_init_schemes():
    d = 64

    def draw(init, **kw):
        return san.init_layer(
            san.SANConfig(d=d, n_layers=1, init=init, bias=True, out_proj=True, **kw), 0
        )

    default = draw("torch_default")
    assert default.W_Q.abs().max() <= 1 / math.sqrt(
        d
    ) and default.b_V.abs().max() <= 1 / math.sqrt(d)
    assert default.W_K.std().item() == pytest.approx(1 / math.sqrt(3 * d), rel=0.05)
    bert = draw("bert_normal")
    assert bert.W_V.std().item() == pytest.approx(0.02, rel=0.05) and torch.all(bert.b_Q == 0)
    orthogonal = draw("orthogonal_v").W_V
    torch.testing.assert_close(orthogonal.T @ orthogonal, torch.eye(d, dtype=torch.float64))
    assert torch.linalg.matrix_norm(draw("spectral_v").W_V, ord=2).item() == pytest.approx(1.0)
    gained = draw("torch_default", qk_gain=4.0)
    torch.testing.assert_close(gained.W_Q, 4 * default.W_Q)
    torch.testing.assert_close(gained.W_V, default.W_V)


def test_default_draw_is_torchs_uniform_from_its_own_stream():
    """Pins the bits of the draw: U(-1/sqrt(d), 1/sqrt(d)) from the stream (seed, layer, role)."""
    config = san.SANConfig(d=12, n_layers=4, bias=True, out_proj=True)
    w = san.init_layer(config, 3, seed=9)
    for index, role in enumerate(("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O")):
        shape = getattr(w, role).shape
        u = torch.rand(shape, generator=rng.generator(9, 3, index), dtype=torch.float64)
        assert torch.equal(getattr(w, role), (u * 2 - 1) / math.sqrt(12)), role


def test_query_key_value_weights_share_one_buffer_and_copies_give_the_same_layer(gen):
    config = san.SANConfig.bert(n_layers=1, d=24, n_heads=3, d_ff=40)
    for seed in (2, [2, 5]):  # one network, and one per seed
        w = san.init_layer(config, 0, seed=seed)
        storages = {t.untyped_storage().data_ptr() for t in (w.W_Q, w.W_K, w.W_V)}
        assert len(storages) == 1 and w.b_Q.untyped_storage() is not None
        X = torch.randn(2, 2, 9, 24, generator=gen, dtype=torch.float64)
        if isinstance(seed, list):
            w = san._align_to_batch(w, X.ndim)
        fused, _ = san.self_attention(X, w, config)
        apart, _ = san.self_attention(X, w.map(torch.clone), config)  # separate buffers
        assert torch.equal(fused, apart)
        swapped = replace(w, W_Q=w.W_K, W_K=w.W_Q)  # adjacent views, in the wrong order
        torch.testing.assert_close(
            san.self_attention(X, swapped, config)[0],
            san.self_attention(X, swapped.map(torch.clone), config)[0],
        )


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize(
    "batch, mask, d_qk",
    [
        ((), None, None),
        ((3,), "causal", None),
        ((3,), "batched", 2.0),
        ((2, 3), "causal", "per-run"),
        ((2, 3), "batched", None),
    ],
)
def test_the_fused_kernel_computes_the_explicit_softmax_layer(batch, mask, d_qk, dtype, rtol):
    config = san.SANConfig.bert(variant="skip_ln", n_layers=1, d=24, n_heads=3, d_ff=40)
    g = torch.Generator().manual_seed(4)
    X = torch.randn(*batch, 9, 24, generator=g, dtype=dtype)
    w = san.init_layer(config, 0, seed=1, dtype=dtype)
    if mask == "causal":
        mask = masks.make("causal", 9)
    elif mask == "batched":  # one mask per run of the last batch dim
        mask = torch.stack([masks.make(k, 9) for k in ("causal", "sliding_window", "complete")])
    if d_qk == "per-run":
        d_qk = torch.tensor([1.0, 4.0, 16.0], dtype=torch.float64)
    scale = None if d_qk is None else attention.temperature_scale(d_qk, X, 3)
    explicit, A = san.apply_layer(X, w, config, mask, scale)
    fused, none = san.apply_layer(X, w, config, mask, scale, weights=False)
    assert A is not None and none is None
    assert fused.shape == explicit.shape == X.shape
    scale_of_output = explicit.abs().max()
    assert float((fused - explicit).abs().max()) <= rtol * float(scale_of_output)
    if mask is not None:  # the mask is not ignored
        unmasked = san.apply_layer(X, w, config, None, scale, weights=False)[0]
        assert not torch.allclose(fused, unmasked)


def test_simulate_runs_the_fused_kernel_unless_it_records_attention(gen):
    config = san.SANConfig.bert(n_layers=3, d=24, n_heads=3, d_ff=40)
    X0 = torch.randn(4, 9, 24, generator=gen, dtype=torch.float64)
    mask = masks.make("causal", 9)
    plain = san.simulate(X0, config, mask=mask, seed=3)
    recorded = san.simulate(X0, config, mask=mask, seed=3, record_epsilon=True)
    assert_close_to_scale(plain["mu"], recorded["mu"], rtol=1e-12)
    X, w = X0, list(san.init_layers(config, 3))
    for layer in w:
        X, _ = san.apply_layer(X, layer, config, mask, weights=False)
    assert torch.equal(plain.final, X)


def test_attention_weights_do_not_depend_on_variant_bias_or_dtype():
    plain = san.init_layer(san.SANConfig(d=16, n_layers=3), 2, seed=5)
    full = san.init_layer(
        san.SANConfig(d=16, n_layers=3, variant="full", bias=True, out_proj=True), 2, seed=5
    )
    single = san.init_layer(san.SANConfig(d=16, n_layers=3), 2, seed=5, dtype=torch.float32)
    assert torch.equal(plain.W_Q, full.W_Q) and torch.equal(plain.W_V, full.W_V)
    assert torch.equal(single.W_K, plain.W_K.float())
    other_layer = san.init_layer(san.SANConfig(d=16, n_layers=3), 1, seed=5)
    other_seed = san.init_layer(san.SANConfig(d=16, n_layers=3), 2, seed=6)
    assert not torch.equal(plain.W_Q, other_layer.W_Q) and not torch.equal(
        plain.W_Q, other_seed.W_Q
    )


def toy_run(X0, **kw):
    config = san.SANConfig(d=X0.shape[-1], n_layers=kw.pop("n_layers", 20), init="orthogonal_v")
    return san.simulate(X0, config, d_qk=kw.pop("d_qk", 1.0), metrics=("mu", "stable_rank"), **kw)


def test_same_seed_same_bits(gen):
    X0 = torch.randn(3, 8, 8, generator=gen, dtype=torch.float64)
    first, second = toy_run(X0, seed=11), toy_run(X0, seed=11)
    assert torch.equal(first["mu"], second["mu"]) and torch.equal(first.final, second.final)
    assert not torch.equal(first["mu"], toy_run(X0, seed=12)["mu"])


def test_batched_equals_one_by_one(gen):
    X0 = torch.randn(4, 8, 8, generator=gen, dtype=torch.float64)
    mask = masks.make("causal_sliding_window", 8)
    batched = toy_run(X0, mask=mask)
    for i in range(4):
        single = toy_run(X0[i], mask=mask)
        assert_close_to_scale(batched["mu"][:, i], single["mu"], rtol=1e-12)
        torch.testing.assert_close(
            batched["stable_rank"][:, i], single["stable_rank"], rtol=1e-10, atol=0
        )


def test_seed_masks_and_temperatures_batch_like_separate_runs(gen):
    X0 = torch.randn(2, 3, 8, 8, generator=gen, dtype=torch.float64)
    seeds = [4, 9]
    stacked_masks = torch.stack([masks.make("causal", 8), masks.make("sliding_window", 8)])[
        :, None
    ]
    d_qk = torch.tensor([[0.5], [4.0]])
    batched = toy_run(X0, seed=seeds, mask=stacked_masks, d_qk=d_qk)
    for i, (seed, name, temperature) in enumerate(
        zip(seeds, ["causal", "sliding_window"], [0.5, 4.0], strict=True)
    ):
        single = toy_run(X0[i], seed=seed, mask=masks.make(name, 8), d_qk=temperature)
        assert_close_to_scale(batched["mu"][:, i], single["mu"], rtol=1e-12)


def test_explicit_weights_reproduce_the_seeded_run(gen):
    config = san.SANConfig(
        d=8, n_layers=6, variant="skip_ln", layernorm="centered", bias=True, out_proj=True
    )
    X0 = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    seeded = san.simulate(X0, config, seed=2)
    explicit = san.simulate(X0, config, weights=list(san.init_layers(config, 2)))
    assert torch.equal(seeded["mu"], explicit["mu"])


def test_float64_mu_keeps_decaying_where_float32_floors(gen):
    X0 = torch.randn(16, 16, generator=gen, dtype=torch.float64) / 4
    mask = masks.make("causal", 16)
    decay64 = toy_run(X0, mask=mask, n_layers=60)["mu"]
    decay32 = toy_run(X0.float(), mask=mask, n_layers=60)["mu"]
    log_fall64 = torch.log10(decay64[-1] / decay64[0])
    log_fall32 = torch.log10(decay32[-1] / decay32[0])
    assert log_fall64 < -13  # keeps collapsing to the float64 floor
    assert -9 < log_fall32 < -5  # float32 stalls near 1e-7: a false floor
    torch.testing.assert_close(
        decay32[:10], decay64[:10], rtol=1e-4, atol=0
    )  # same dynamics before the floor


def test_record_epsilon_is_the_smallest_edge_weight(gen):
    config = san.SANConfig(d=6, n_layers=2)
    X0 = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    mask = masks.make("causal_sliding_window", 5, window=2)
    result = san.simulate(X0, config, mask=mask, d_qk=1.0, record_epsilon=True)
    w = san.init_layer(config, 0)
    A = attention.attention_matrix(X0, w.W_Q, w.W_K, mask, d_qk=1.0)
    assert math.isnan(result["epsilon"][0])
    assert result["epsilon"][1].item() == pytest.approx(A[mask].min().item(), rel=1e-13)


def test_a_mask_list_is_cycled_over_layers_like_layers_run_by_hand(gen):
    config = san.SANConfig(d=6, n_layers=5, init="orthogonal_v")
    X0 = torch.randn(2, 6, 6, generator=gen, dtype=torch.float64)
    cycle = [masks.make("causal", 6), masks.make("sliding_window", 6), masks.make("strided", 6)]
    result = san.simulate(X0, config, mask=cycle, d_qk=1.0, seed=4, record_epsilon=True)
    X, mu, eps = X0, [metrics.mu(X0)], []
    for layer in range(5):
        mask = cycle[layer % 3]
        w = san.init_layer(config, layer, seed=4)
        X, A = san.apply_layer(X, w, config, mask, scale=1.0)
        mu.append(metrics.mu(X))
        eps.append(A[..., 0, :, :][mask.expand_as(A[..., 0, :, :])].reshape(2, -1).amin(-1))
    assert torch.equal(result.final, X)
    assert torch.equal(result["mu"], torch.stack(mu))
    torch.testing.assert_close(result["epsilon"][1:], torch.stack(eps), rtol=0, atol=0)
    fixed = san.simulate(X0, config, mask=cycle[0], d_qk=1.0, seed=4)
    assert not torch.allclose(fixed["mu"][2:], result["mu"][2:])  # the cycle is not ignored
    single = san.simulate(X0, config, mask=[cycle[1]], d_qk=1.0, seed=4)
    assert torch.equal(
        single.final, san.simulate(X0, config, mask=cycle[1], d_qk=1.0, seed=4).final
    )


def test_compose_is_the_support_of_the_layers_attention_product(gen):
    """masks.compose multiplies in simulate's layer order: A_1 A_0 is nonzero exactly there."""
    config = san.SANConfig(d=4, n_layers=2)
    X = torch.randn(7, 4, generator=gen, dtype=torch.float64)
    first = masks.make("causal_sliding_window", 7)  # token i attends to i - 1 and itself
    second = torch.eye(7, dtype=torch.bool)
    second[:, -1] = True  # every token attends to the last one and itself
    X1, A0 = san.apply_layer(X, san.init_layer(config, 0), config, first)
    _, A1 = san.apply_layer(X1, san.init_layer(config, 1), config, second)
    product = A1[0] @ A0[0]
    assert torch.equal(product > 0, masks.compose([first, second]))
    assert not torch.equal(product > 0, masks.compose([second, first]))


def test_sweeps_cycle_mask_lists_like_simulate(tmp_path):
    n, d = 9, 6
    X0 = inputs.embedding_inputs(2, n, d, seed=3)
    configs = {
        "attention": san.SANConfig(d=d, n_layers=7),
        "ln": san.SANConfig(d=d, n_layers=7, variant="ln"),
    }
    swin = [masks.make("swin_2d", n, window=3), masks.make("swin_2d", n, window=3, shift=True)]
    mask_set = {
        "swin": swin,  # period 2
        "three": [masks.make("causal", n), swin[1], masks.make("neighborhood_2d", n)],  # period 3
        "causal": masks.make("causal", n),
    }
    grid = sweep.plan(X0, configs, mask_set)
    assert grid.mask.shape == (6, 3, 1, 1, n, n)  # lcm of the periods, then the masks
    frame = sweep.sweep(X0, configs, mask_set, seed=2)
    for label, config in configs.items():
        for name, mask in mask_set.items():
            expected = san.simulate(X0, config, mask=mask, seed=2)["mu"]
            rows = frame[(frame["config"] == label) & (frame["mask"] == name)]
            got = rows.pivot(index="layer", columns="sample", values="mu").to_numpy()
            assert_close_to_scale(got, expected, rtol=1e-10)
    resumable = chunks.sweep(X0, configs, mask_set, seed=2, folder=tmp_path, progress=False)
    pd.testing.assert_frame_equal(resumable, frame, check_exact=True)
    reused = chunks.sweep(
        X0, configs, mask_set, seed=2, folder=tmp_path, executor=NoCompute(), progress=False
    )
    pd.testing.assert_frame_equal(reused, frame, check_exact=True)


class NoCompute(executors.LocalExecutor):
    """An executor that refuses to compute: a rerun must read every chunk back."""

    def map(self, fn, items):
        assert not list(items), "a chunk of the finished sweep was recomputed"
        return iter(())


def test_outlier_removal_in_the_stack(gen):
    config = san.SANConfig(d=10, n_layers=1, remove_outlier=True)
    X = torch.randn(7, 10, generator=gen, dtype=torch.float64)
    _, A = san.apply_layer(X, san.init_layer(config, 0), config)
    assert A.sum(-1).abs().max() < 1e-12


def test_metrics_and_shapes(gen):
    config = san.SANConfig(d=12, n_heads=3, n_layers=4, out_proj=True, bias=True)
    X0 = torch.randn(2, 6, 12, generator=gen, dtype=torch.float32)
    result = san.simulate(X0, config, metrics=list(metrics.METRICS), progress=False)
    for name in metrics.METRICS:
        assert result[name].shape == (5, 2)
    assert result.final.dtype == torch.float32 and result.final.shape == X0.shape


def test_cpu_device_path_equals_default(gen):
    X0 = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    config = san.SANConfig(d=8, n_layers=3)
    assert torch.equal(san.simulate(X0, config)["mu"], san.simulate(X0.to("cpu"), config)["mu"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_matches_cpu(gen):
    X0 = torch.randn(3, 16, 32, generator=gen, dtype=torch.float64)
    config = san.SANConfig(d=32, n_layers=6, n_heads=4, variant="skip_ln", layernorm="centered")
    cpu, cuda = san.simulate(X0, config), san.simulate(X0.cuda(), config)
    assert_close_to_scale(cuda["mu"], cpu["mu"], rtol=1e-9)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: san.SANConfig(d=8, n_layers=-1), "n_layers must be an int >= 0"),
        (lambda: san.SANConfig(d=8, n_layers=2, n_heads=3), "n_heads must divide d=8"),
        (
            lambda: san.SANConfig(d=8, n_layers=2, variant="pre_ln"),
            "variant must be one of attention, skip, ln, skip_ln, full",
        ),
        (
            lambda: san.SANConfig(d=8, n_layers=2, init="xavier"),
            "init must be one of torch_default, bert_normal",
        ),
        (
            lambda: san.SANConfig(d=8, n_layers=2, layernorm="batch"),
            "layernorm must be one of scale, centered, rms",
        ),
        (lambda: san.SANConfig(d="8", n_layers=2), "d must be an int >= 1"),
        (
            lambda: san.simulate(torch.zeros(4, 7), san.SANConfig(d=8, n_layers=1)),
            r"X0 must be a tensor of shape \(\.\.\., n, d=8\)",
        ),
        (
            lambda: san.simulate(
                torch.zeros(4, 8, dtype=torch.long), san.SANConfig(d=8, n_layers=1)
            ),
            "X0 must be a floating-point tensor",
        ),
        (
            lambda: san.simulate(
                torch.zeros(4, 8), san.SANConfig(d=8, n_layers=1), mask=masks.make("causal", 5)
            ),
            "mask must be",
        ),
        (
            lambda: san.simulate(torch.zeros(4, 8), san.SANConfig(d=8, n_layers=1), mask=[]),
            "mask must be a tensor or a non-empty list of them",
        ),
        (
            lambda: san.simulate(
                torch.zeros(4, 8),
                san.SANConfig(d=8, n_layers=1),
                mask=[masks.make("causal", 4), masks.make("causal", 5)],
            ),
            "masks of a sequence must share one shape",
        ),
        (
            lambda: san.simulate(
                torch.zeros(4, 8), san.SANConfig(d=8, n_layers=1), mask=[masks.make("causal", 5)]
            ),
            r"mask must be \(4, 4\) to match X0's tokens, got \(5, 5\)",
        ),
        (
            lambda: san.simulate(torch.zeros(4, 8), san.SANConfig(d=8, n_layers=1), seed=-1),
            "seed must be an int >= 0",
        ),
        (
            lambda: san.simulate(torch.zeros(4, 8), san.SANConfig(d=8, n_layers=1), seed=[1, 2]),
            "X0 needs a leading seed dim",
        ),
        (
            lambda: san.simulate(torch.zeros(4, 8), san.SANConfig(d=8, n_layers=1), d_qk=-2),
            "d_qk must be a number > 0",
        ),
        (
            lambda: san.simulate(
                torch.zeros(4, 8), san.SANConfig(d=8, n_layers=1), metrics=["rank"]
            ),
            "metric must be one of",
        ),
        (lambda: san.init_layer(san.SANConfig(d=8, n_layers=1), -1), "layer must be an int >= 0"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ParameterError, match=match):
        call()


def test_orthogonal_value_path_draws_w_v_and_w_o_orthogonal_and_keeps_every_other_weight():
    config = san.SANConfig.bert(variant="ln", n_layers=1, d=24, n_heads=3)
    orthogonal = san.init_layer(replace(config, init="orthogonal_vo"), 0, seed=4)
    default = san.init_layer(config, 0, seed=4)
    eye = torch.eye(24, dtype=torch.float64)
    for W in (orthogonal.W_V, orthogonal.W_O, orthogonal.W_V @ orthogonal.W_O):
        torch.testing.assert_close(W.T @ W, eye)
    only_v = san.init_layer(replace(config, init="orthogonal_v"), 0, seed=4)
    assert torch.equal(orthogonal.W_V, only_v.W_V) and torch.equal(only_v.W_O, default.W_O)
    for role in ("W_Q", "W_K", "b_Q", "b_K", "b_V", "b_O"):
        assert torch.equal(getattr(orthogonal, role), getattr(default, role)), role
