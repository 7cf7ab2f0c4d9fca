"""The shared-draw float32 engine (simulate_shared, gap.width_sweep(fast=True)):
the same model as the reference engine, layer by layer, on its own paired draws."""

import math

import numpy as np
import pytest
import torch

from collapse import gap, metrics
from collapse.checks import ParameterError
from collapse.gap_shared import SHARED_METRICS, _stable_ranks, shared_draws, simulate_shared


def _by_hand(config: gap.GapConfig, draws) -> torch.Tensor:
    """sr(XX^T) per layer of `config` on `draws`, in float64, one gap_layer at a time."""
    X, values = draws["X0"].double(), []
    for layer in range(config.n_layers + 1):
        if layer:
            A = (
                torch.softmax(draws["logits"][layer - 1].double(), -1)
                if config.attention == "markov"
                else torch.eye(config.T, dtype=torch.float64)
            )
            X = gap.gap_layer(X, A, draws["W"][layer - 1].double(), config)
        values.append(metrics.gram_stable_rank(X))
    return torch.stack(values)


@pytest.mark.parametrize("T, d", [(6, 15), (9, 5)])
def test_shared_engine_is_the_stack_run_layer_by_layer(T, d):
    """Every combination of fix, skip and LN, and identity attention with each, in float64 on
    the very draws: the factored chains and the rescaling change nothing but rounding."""
    variants = gap.fig7_variants("markov") | {
        "Identity A+LN": {"attention": "identity", "layernorm": True},
        "Identity A+skip": {"attention": "identity", "skip": True},
        "Identity A+skip+LN": {"attention": "identity", "skip": True, "layernorm": True},
    }
    # reversed: the engine runs the collapsing stacks (Markov, no fix) first, then reorders
    configs = [gap.GapConfig(T=T, d=d, n_layers=5, **kw) for kw in reversed(variants.values())]
    got = simulate_shared(configs, [3, 8], dtype=torch.float64)["gram_stable_rank"]
    for s, seed in enumerate([3, 8]):
        draws = shared_draws(T, d, 5, seed)
        for c, config in enumerate(configs):
            torch.testing.assert_close(
                got[c, :, s], _by_hand(config, draws), rtol=1e-10, atol=0, msg=config.label
            )


def test_shared_draws_are_paired_float32_and_a_prefix_in_depth():
    deep = shared_draws(8, 20, 4, 5)
    assert {k: (v.dtype, tuple(v.shape)) for k, v in deep.items()} == {
        "X0": (torch.float32, (8, 20)),
        "W": (torch.float32, (4, 20, 20)),
        "logits": (torch.float32, (4, 8, 8)),
    }
    torch.testing.assert_close(deep["X0"] @ deep["X0"].mT, torch.eye(8), atol=1e-6, rtol=0)
    tall = shared_draws(20, 8, 1, 5)["X0"]
    torch.testing.assert_close(tall.mT @ tall, torch.eye(8), atol=1e-6, rtol=0)
    shallow, identity = shared_draws(8, 20, 2, 5), shared_draws(8, 20, 4, 5, markov=False)
    for name in ("X0", "W", "logits"):
        assert torch.equal(shallow[name], deep[name][:2] if name != "X0" else deep[name])
    assert "logits" not in identity
    assert torch.equal(identity["X0"], deep["X0"]) and torch.equal(identity["W"], deep["W"])
    assert not torch.equal(shared_draws(8, 20, 4, 6)["W"], deep["W"])
    spread = deep["logits"] - deep["logits"].mean()
    assert spread.std().item() == pytest.approx(math.sqrt(math.log(2)), rel=0.15)


def test_float32_stays_finite_and_matches_float64_where_unscaled_weights_overflow():
    """Unrescaled, A+skip at T = d = 100 grows ~10x a layer: X X^T would pass float32's 3e38
    by layer 18."""
    configs = [
        gap.GapConfig(T=100, d=100, n_layers=24, **kw)
        for kw in gap.fig7_variants("markov").values()
    ]
    single = simulate_shared(configs, [0, 1], metrics=SHARED_METRICS)
    double = simulate_shared(configs, [0, 1], metrics=SHARED_METRICS, dtype=torch.float64)
    for name in SHARED_METRICS:
        assert torch.isfinite(single[name]).all()
        torch.testing.assert_close(single[name], double[name], rtol=1e-3, atol=0)
    layer0 = torch.full((9, 2), 100.0, dtype=torch.float64)  # X_0: orthonormal rows
    torch.testing.assert_close(single["stable_rank"][:, 0], layer0, rtol=1e-5, atol=0)


def test_shared_seeds_batch_like_separate_runs():
    configs = [gap.GapConfig(T=10, d=20, n_layers=3, **kw) for kw in gap.fig7_variants().values()]
    together = simulate_shared(configs, [2, 5, 7], metrics=("stable_rank",))["stable_rank"]
    chunked = simulate_shared(configs, [2, 5, 7], metrics=("stable_rank",), seed_batch=2)
    alone = simulate_shared(configs, 5, metrics=("stable_rank",))["stable_rank"]
    torch.testing.assert_close(chunked["stable_rank"], together, rtol=1e-6, atol=0)
    torch.testing.assert_close(alone[:, :, 0], together[:, :, 1], rtol=1e-6, atol=0)


def test_shared_engine_inputs_and_a_zero_stack():
    with pytest.raises(ParameterError, match="Markov and identity attention with the softmax"):
        simulate_shared([gap.GapConfig(T=4, d=4, n_layers=1, attention="xavier")])
    with pytest.raises(ParameterError, match="Markov and identity attention with the softmax"):
        simulate_shared([gap.GapConfig(T=4, d=4, n_layers=1, map="centred")])
    with pytest.raises(ParameterError, match="metric must be one of stable_rank, gram"):
        simulate_shared([gap.GapConfig(T=4, d=4, n_layers=1)], metrics=("mu",))
    with pytest.raises(ParameterError, match="dtype must be"):
        simulate_shared([gap.GapConfig(T=4, d=4, n_layers=1)], dtype=torch.float16)
    # T = 1: A⊥ = A - 1 = 0, so the fixed stack is zero after one layer; its ranks are NaN
    zero = simulate_shared([gap.GapConfig(T=1, d=3, n_layers=2, fix=True)])
    assert torch.isnan(zero["gram_stable_rank"][0, 1:]).all()


def test_fast_width_sweep_frame():
    variants = gap.fig7_variants("markov")
    kw = {"n_layers": 2, "seeds": [0, 1], "metrics": SHARED_METRICS}
    frame = gap.width_sweep(variants, [6, 10], [1.0, 0.5], fast=True, **kw)
    assert len(frame) == 9 * 4 * 3 * 2
    assert np.isfinite(frame[list(SHARED_METRICS)].to_numpy()).all()
    one = frame[(frame["variant"] == "A⊥+LN") & (frame["T"] == 10) & (frame["gamma"] == 0.5)]
    alone = simulate_shared(
        [gap.GapConfig(T=10, d=20, n_layers=2, fix=True, layernorm=True)], [0, 1]
    )["gram_stable_rank"][0]
    np.testing.assert_allclose(
        one.sort_values(["seed", "layer"])["gram_stable_rank"], alone.T.numpy().ravel()
    )
    exact = gap.width_sweep(variants, [6, 10], [1.0, 0.5], fast=True, dtype=torch.float64, **kw)
    np.testing.assert_allclose(exact["stable_rank"], frame["stable_rank"], rtol=1e-4)


def test_stable_ranks_take_certified_power_steps_or_fall_back_to_eigvalsh():
    g = torch.Generator().manual_seed(7)
    noise = torch.randn(4, 12, 40, generator=g)
    collapsed = noise + 5 * torch.randn(4, 1, 40, generator=g)  # one dominant direction
    u = torch.tensor([[0.5, 0.5, 0.5, 0.5], [0.5**0.5, -(0.5**0.5), 0, 0]])
    # lam_max = 10 on a vector orthogonal to the all-ones start, itself an eigenvector: the
    # power steps stall at theta = 1 with zero residual, which the Frobenius test rejects
    trap = 10 * u[1:].mT @ u[1:] + u[:1].mT @ u[:1] + 0.5 * (torch.eye(4) - u.mT @ u)
    grams = [collapsed @ collapsed.mT, noise @ noise.mT, trap[None], torch.zeros(1, 4, 4)]
    for G in grams:
        lam = torch.linalg.eigvalsh(G.double())
        sr, gram_sr = _stable_ranks(G, True)
        torch.testing.assert_close(sr, lam.sum(-1) / lam[:, -1], rtol=1e-5, atol=0, equal_nan=True)
        want = (lam**2).sum(-1) / lam[:, -1] ** 2
        torch.testing.assert_close(gram_sr, want, rtol=1e-5, atol=0, equal_nan=True)
    assert torch.isnan(_stable_ranks(torch.full((1, 3, 3), math.inf), True)[0])
