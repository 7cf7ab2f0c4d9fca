import math

import numpy as np
import pandas as pd
import pytest
import torch
from numerics import assert_close_to_scale

from collapse import analysis, cost, inputs, masks, runtime, san, sweep
from collapse.checks import ParameterError

N, D = 10, 12


def small_configs(n_layers=4, **overrides):
    return {
        v: san.SANConfig.bert(variant=v, n_layers=n_layers, d=D, n_heads=3, d_ff=20, **overrides)
        for v in san.VARIANTS
    }


def small_masks(names=("complete", "causal", "causal_sliding_window")):
    return {name: masks.make(name, N) for name in names}


def test_every_cell_equals_its_own_simulate_call():
    X0 = inputs.embedding_inputs(3, N, D, seed=5)
    configs = {
        **small_configs(),
        "bert_normal_ln": san.SANConfig.bert(
            variant="ln", n_layers=4, d=D, n_heads=3, init="bert_normal"
        ),
    }
    frame = sweep.sweep(
        X0,
        configs,
        small_masks(),
        d_qk=[0.25, None, 9.0],
        seed=[1, 2],
        metrics=("mu", "stable_rank"),
    )
    for label, config in configs.items():
        for name, mask in small_masks().items():
            for temperature in (0.25, None, 9.0):
                for seed in (1, 2):
                    expected = san.simulate(
                        X0,
                        config,
                        mask=mask,
                        d_qk=temperature,
                        seed=seed,
                        metrics=("mu", "stable_rank"),
                    )
                    cell = dict(
                        config=label,
                        mask=name,
                        d_qk=4.0 if temperature is None else temperature,
                        seed=seed,
                    )
                    for metric in ("mu", "stable_rank"):
                        got = analysis.curves(frame, metric, **cell)
                        assert_close_to_scale(got, expected[metric], rtol=1e-10)


def test_columns_and_the_head_width_default():
    X0 = inputs.embedding_inputs(2, N, D)
    frame = sweep.sweep(X0, small_configs(n_layers=2), small_masks(("causal",)), d_qk=[None])
    assert list(frame.columns) == ["config", "mask", "d_qk", "seed", "sample", "layer", "mu"]
    assert set(frame["d_qk"]) == {4.0}  # d=12, 3 heads: head width 4
    assert len(frame) == len(san.VARIANTS) * 1 * 1 * 2 * 3
    assert sorted(frame["config"].unique()) == sorted(san.VARIANTS)


def test_runs_are_paired_and_seeded():
    X0 = inputs.embedding_inputs(2, N, D)
    run = lambda seed: sweep.sweep(X0, small_configs(), small_masks(), seed=seed)  # noqa: E731
    first, again, other = run(3), run(3), run(4)
    pd.testing.assert_frame_equal(first, again)
    start = first[first["layer"] == 0].groupby("sample")["mu"].nunique()
    assert (start == 1).all()  # every config, mask and seed starts from the same inputs
    assert not np.allclose(first["mu"], other["mu"])


def test_sample_chunks_give_the_same_frame():
    X0 = inputs.embedding_inputs(5, N, D, seed=2)
    whole = sweep.sweep(X0, small_configs(), small_masks(), d_qk=[1.0, 16.0])
    chunked = sweep.sweep(X0, small_configs(), small_masks(), d_qk=[1.0, 16.0], batch_size=2)
    key = ["config", "mask", "d_qk", "seed", "sample", "layer"]
    whole, chunked = (f.sort_values(key).reset_index(drop=True) for f in (whole, chunked))
    pd.testing.assert_frame_equal(whole[key], chunked[key])
    runs = [c for c in key if c != "layer"]
    curves = [f.pivot_table(index="layer", columns=runs, values="mu") for f in (chunked, whole)]
    assert_close_to_scale(curves[0].to_numpy(), curves[1].to_numpy(), rtol=1e-10)
    assert sorted(chunked["sample"].unique()) == [0, 1, 2, 3, 4]


def test_configs_with_different_weights_are_not_merged():
    X0 = inputs.embedding_inputs(2, N, D)
    configs = {
        "default": small_configs()["ln"],
        "normal": san.SANConfig.bert(variant="ln", n_layers=4, d=D, n_heads=3, init="bert_normal"),
    }
    frame = sweep.sweep(X0, configs, small_masks(("causal",)))
    a, b = (analysis.curves(frame, config=c) for c in ("default", "normal"))
    assert not np.allclose(a[1:], b[1:])
    assert sweep._weight_key(small_configs()["ln"]) == sweep._weight_key(small_configs()["full"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(configs={}), "at least one"),
        (dict(configs={"x": san.SANConfig(d=7, n_layers=1)}), "d=12"),
        (dict(masks={"causal": masks.make("causal", N + 1)}), "shape"),
        (dict(d_qk=[]), "d_qk"),
        (dict(d_qk=[1.0, -2.0]), "d_qk"),
        (dict(seed=[]), "seed"),
        (dict(batch_size=0), "batch_size"),
        (dict(metrics=("nope",)), "metric"),
    ],
)
def test_bad_arguments_raise_one_clear_error(kwargs, message):
    args = dict(configs=small_configs(n_layers=1), masks=small_masks(("causal",)))
    args.update(kwargs)
    X0 = inputs.embedding_inputs(1, N, D)
    with pytest.raises(ParameterError, match=message):
        sweep.sweep(X0, args.pop("configs"), args.pop("masks"), **args)


def test_embedding_inputs_are_bert_layernormed_and_share_position_and_type_rows():
    X = inputs.embedding_inputs(2, 6, 4096, seed=1)
    assert X.shape == (2, 6, 4096) and X.dtype == torch.float64
    torch.testing.assert_close(
        X.mean(-1), torch.zeros(2, 6, dtype=torch.float64), atol=1e-12, rtol=0
    )
    torch.testing.assert_close(X.var(-1, unbiased=False), torch.ones(2, 6, dtype=torch.float64))
    unit = X / X.norm(dim=-1, keepdim=True)
    same_position = (unit[0] * unit[1]).sum(-1)  # share position and type rows: cos ~ 2/3
    same_sample = unit[0] @ unit[0].T  # share the type row only: cos ~ 1/3
    assert same_position.mean().item() == pytest.approx(2 / 3, abs=0.05)
    assert same_sample[~torch.eye(6, dtype=torch.bool)].mean().item() == pytest.approx(
        1 / 3, abs=0.05
    )
    assert torch.equal(X, inputs.embedding_inputs(2, 6, 4096, seed=1))
    assert not torch.equal(X, inputs.embedding_inputs(2, 6, 4096, seed=2))


def synthetic_frame(rate=-0.5, layers=30, floor_from=None):
    t = np.arange(layers + 1)
    rows = []
    for sample, offset in enumerate([0.0, 1.0]):
        mu = np.exp(offset + rate * t)
        if floor_from is not None:
            mu[floor_from:] = 0.0
        rows.append(
            pd.DataFrame(
                {
                    "config": "c",
                    "mask": "m",
                    "d_qk": 1.0,
                    "seed": 0,
                    "sample": sample,
                    "layer": t,
                    "mu": mu,
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def test_rates_fit_the_slope_and_skip_the_floor():
    table = analysis.rates(synthetic_frame(-0.5))
    assert table["slope"].iloc[0] == pytest.approx(-0.5) and table["std"].iloc[0] == pytest.approx(
        0, abs=1e-12
    )
    floored = analysis.rates(
        synthetic_frame(-0.5, floor_from=10)
    )  # zeros after layer 10 must not bend the fit
    assert floored["slope"].iloc[0] == pytest.approx(-0.5)
    late = analysis.rates(synthetic_frame(-0.5), start=6, stop=12)
    assert late["runs"].iloc[0] == 2 and late["slope"].iloc[0] == pytest.approx(-0.5)


def test_log_stats_and_at_layer():
    frame = synthetic_frame(-0.5, layers=4, floor_from=3)
    stats = analysis.log_stats(frame)
    row = stats[stats["layer"] == 1].iloc[0]
    assert row["mean"] == pytest.approx(0.5 - 0.5) and row["std"] == pytest.approx(
        np.std([-0.5, 0.5], ddof=1)
    )
    assert np.isfinite(stats["mean"]).all()  # exact zeros are clipped, not -inf
    assert stats[stats["layer"] == 3]["mean"].iloc[0] == pytest.approx(math.log(1e-300))
    table = analysis.at_layer(frame, 2)
    assert table.loc[("c", "m"), 1.0] == pytest.approx(0.5 - 1.0)


def test_curves_selects_and_complains():
    frame = synthetic_frame()
    assert analysis.curves(frame, config="c").shape == (31, 2)
    with pytest.raises(ParameterError, match="no rows"):
        analysis.curves(frame, config="other")
    with pytest.raises(ParameterError, match="no column"):
        analysis.curves(frame, colour="red")


def test_grid_flops_counts_projections_attention_and_ffn():
    attention = san.SANConfig.bert(variant="attention", n_layers=2, d=8, n_heads=2, d_ff=32)
    full = san.SANConfig.bert(variant="full", n_layers=2, d=8, n_heads=2, d_ff=32)
    n = 5
    per_layer = 2 * n * 8 * 8 * 4 + 4 * n * n * 8
    assert cost.grid_flops({"a": attention}, n, 3) == 3 * 2 * per_layer
    assert cost.grid_flops({"f": full}, n, 1) == 2 * (per_layer + 4 * n * 8 * 32)


def test_eta_scales_with_flops():
    one = cost.eta_seconds(1e9)
    assert 0 < one < 100
    assert cost.eta_seconds(1e9, efficiency=0.25) > one


def test_summary_reads_first_last_delta_and_slope():
    table = analysis.summary(synthetic_frame(-0.25, layers=8))
    row = table.loc[("c", "m", 1.0)]
    assert row["first"] == pytest.approx(0.5) and row["last"] == pytest.approx(0.5 - 2.0)
    assert row["delta"] == pytest.approx(-2.0) and row["slope"] == pytest.approx(-0.25)


def test_unshared_embedding_rows_are_independent():
    X = inputs.embedding_inputs(2, 6, 4096, seed=1, shared=False)
    unit = X / X.norm(dim=-1, keepdim=True)
    assert (unit[0] * unit[1]).sum(-1).abs().max().item() < 0.1  # no shared position row
    off_diagonal = (unit[0] @ unit[0].T)[~torch.eye(6, dtype=torch.bool)]
    assert off_diagonal.abs().max().item() < 0.1  # no shared type row
    torch.testing.assert_close(X.var(-1, unbiased=False), torch.ones(2, 6, dtype=torch.float64))


def test_pick_device_auto_follows_cuda_and_refuses_a_missing_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.pick_device("auto") == torch.device("cpu") == runtime.pick_device("cpu")
    with pytest.raises(ParameterError, match="device cuda: torch sees no CUDA GPU"):
        runtime.pick_device("cuda")
    with pytest.raises(ParameterError, match="device must be one of cpu, cuda, auto"):
        runtime.pick_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runtime.pick_device("auto") == torch.device("cuda") == runtime.pick_device("cuda")
