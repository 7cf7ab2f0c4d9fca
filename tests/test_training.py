import math

import numpy as np
import pytest
import torch
from scipy import stats

from collapse import gap, markov, rng, runtime, training
from collapse.checks import ParameterError

runtime.use_threads(1)


def small(**kw):
    base = dict(T=6, d=6, depth=2, attention="normal", n_samples=4, steps=5, dtype="float64")
    return training.TrainConfig(**{**base, **kw})


def test_adam_step_matches_torch_adam():
    g = torch.Generator().manual_seed(0)
    p0 = torch.randn(3, 4, generator=g, dtype=torch.float64)
    target = torch.randn(3, 4, generator=g, dtype=torch.float64)
    ours, theirs = p0.clone(), p0.clone().requires_grad_(True)
    m, v = torch.zeros_like(p0), torch.zeros_like(p0)
    opt = torch.optim.Adam([theirs], lr=0.05)
    for step in range(1, 8):
        opt.zero_grad()
        ((theirs - target) ** 3).sum().backward()
        opt.step()
        training.adam_step(ours, 3 * (ours - target) ** 2, m, v, step, 0.05)
    torch.testing.assert_close(ours, theirs.detach(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("attention", training.KINDS)
@pytest.mark.parametrize("weights", training.ATTENTION_WEIGHTS)
def test_batched_models_train_like_separate_runs(attention, weights):
    """Seeds, learning rates and fix flags batched together give each model its own run, and
    blocking changes nothing."""
    config = small(attention=attention, attention_weights=weights)
    together = training.train(config, [0, 1], [0.01, 0.1])
    assert together.shape == (6, 2, 2, 2)
    alone = training.train(config, 1, [0.1], fixes=[True])
    torch.testing.assert_close(together[:, 1, 1, 1], alone[:, 0, 0, 0], rtol=1e-10, atol=0)
    blocked, w_blocked = training.train(
        config, [0, 1], [0.01, 0.1], max_bytes=1.0, return_weights=True
    )  # one model pair per block
    torch.testing.assert_close(blocked, together, rtol=1e-12, atol=0)
    again, w_again = training.train(config, [0, 1], [0.01, 0.1], return_weights=True)
    assert torch.equal(again, together)  # same seeds, same bits
    for k, v in w_again.items():
        assert v.shape[:3] == (2, 2, 2)
        torch.testing.assert_close(w_blocked[k], v, rtol=1e-10, atol=1e-12)


def test_forward_by_hand_and_the_fix():
    config = small(attention="markov", depth=1)
    w = training.init_weights(config, 0)
    w["W_h"] = w["W_h"] + 0.1 * torch.randn(1, 6, 6, dtype=torch.float64)  # not the identity
    X = gap.isometric_input(6, 6, generator=torch.Generator().manual_seed(1))
    A = torch.softmax(w["logits"][0], dim=-1)
    for shift in (0.0, 1 / 6):
        out = training.forward(
            X[None], w, torch.tensor(shift, dtype=torch.float64)
        )  # a batch of one input
        torch.testing.assert_close(out[0], (A - shift) @ X @ w["W_V"][0] @ w["W_h"][0])


def test_key_query_forward_by_hand():
    config = small(attention="normal", depth=1, d=5)
    w = training.init_weights(config, 0)
    X = gap.isometric_input(6, 5, generator=torch.Generator().manual_seed(1))
    A = torch.softmax(X @ w["W_Q"][0] @ (X @ w["W_K"][0]).T / 5**0.5, dim=-1)
    out = training.forward(X[None], w, torch.tensor(1 / 6, dtype=torch.float64))
    torch.testing.assert_close(out[0], (A - 1 / 6) @ X @ w["W_V"][0] @ w["W_h"][0])


def test_markov_logits_are_the_random_markov_draw_and_w_h_starts_at_identity():
    """softmax of the initial logits is exactly markov.random_markov on the same stream."""
    config = small(attention="markov", depth=3)
    w = training.init_weights(config, 4)
    g = rng.generator(4, 2)
    torch.randn(3, 6, 6, generator=g, dtype=torch.float64)  # W_V comes first
    A = markov.random_markov(6, generator=g, batch=(3,))
    assert torch.equal(torch.softmax(w["logits"], dim=-1), A)
    assert torch.equal(w["W_h"], torch.eye(6, dtype=torch.float64).expand(3, 6, 6))


def plain_adam_run(config, seed, lr, fix, steps):
    """The official training loop in plain torch: every weight handed to torch's Adam, but the
    attention's own when they are frozen."""
    X = training.data(config, seed)
    Y = training.target(X, config.target)
    frozen = {"logits", "W_Q", "W_K"} if config.attention_weights == "frozen" else set()
    w = {
        k: v.clone().requires_grad_(k not in frozen)
        for k, v in training.init_weights(config, seed).items()
    }
    opt = torch.optim.Adam([v for k, v in w.items() if k not in frozen], lr=lr)
    shift, losses = (1 / config.T if fix else 0.0), []
    for _ in range(steps + 1):
        out = X
        for layer in range(config.depth):
            if config.attention == "markov":
                A = torch.softmax(w["logits"][layer], dim=-1)
            else:
                Q, K = out @ w["W_Q"][layer], out @ w["W_K"][layer]
                A = torch.softmax(Q @ K.transpose(-1, -2) / config.d**0.5, dim=-1)
            out = (A - shift) @ out @ w["W_V"][layer] @ w["W_h"][layer]
        loss = (out - Y).square().mean()
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        if len(losses) <= steps:
            opt.step()
    return torch.tensor(losses, dtype=torch.float64), {k: v.detach() for k, v in w.items()}


@pytest.mark.parametrize(
    "attention,weights",
    [("markov", "trainable"), ("markov", "frozen"), ("normal", "trainable"), ("xavier", "frozen")],
)
def test_library_training_is_torch_adam_on_every_trained_weight(attention, weights):
    config = small(attention=attention, attention_weights=weights, steps=3)
    losses, trained = training.train(config, [2], [0.05, 0.2], return_weights=True)
    for i, lr in enumerate((0.05, 0.2)):
        for j, fix in enumerate((False, True)):
            ref_losses, ref = plain_adam_run(config, 2, lr, fix, 3)
            torch.testing.assert_close(losses[:, 0, i, j], ref_losses, rtol=1e-10, atol=0)
            for k, v in ref.items():
                torch.testing.assert_close(trained[k][0, i, j], v, rtol=1e-9, atol=1e-12)


def test_frozen_attention_keeps_its_weights_trainable_moves_them():
    init = training.init_weights(small(attention="markov"), 0)
    for weights, moved in (("frozen", False), ("trainable", True)):
        config = small(attention="markov", attention_weights=weights)
        assert set(config.trained) == ({"W_V", "W_h", "logits"} if moved else {"W_V", "W_h"})
        _, w = training.train(config, [0], [0.1], return_weights=True)
        assert torch.equal(w["logits"][0, 0, 0], init["logits"]) is not moved
        assert not torch.equal(w["W_h"][0, 0, 1], init["W_h"])
    frozen = training.train(small(attention="markov", attention_weights="frozen"), [0], [0.1])
    trainable = training.train(small(attention="markov"), [0], [0.1])
    assert torch.equal(frozen[0], trainable[0])  # same start
    assert not torch.equal(frozen[-1], trainable[-1])


def test_constant_loss_is_the_variance_of_each_seeds_target():
    config = small(n_samples=7)
    base = training.constant_loss(config, [0, 5])
    for i, seed in enumerate((0, 5)):
        Y = training.target(training.data(config, seed).float(), "heaviside").double()
        assert base[i].item() == pytest.approx(((Y - Y.mean()) ** 2).mean().item(), rel=1e-12)
        assert base[i] < Y.square().mean()  # the best constant beats predicting 0
    centred = training.constant_loss(small(n_samples=7, target="heaviside_centred"), [0, 5])
    torch.testing.assert_close(centred, base)  # a shift changes no variance


def test_paired_runs_share_data_and_initial_weights():
    """With fixes (False, False) the two slots are the same model: identical loss curves."""
    losses = training.train(small(attention="xavier"), [3], [0.05], fixes=(False, False))
    assert torch.equal(losses[..., 0], losses[..., 1])
    both = training.train(small(attention="xavier"), [3], [0.05])
    assert not torch.equal(both[..., 0], both[..., 1])


def test_training_reduces_the_loss():
    config = training.TrainConfig(
        T=8, d=8, depth=1, attention="normal", n_samples=10, steps=40, dtype="float64"
    )
    losses = training.train(config, [0, 1], [0.1], fixes=[False])
    assert (losses[-1] < 0.8 * losses[0]).all()


def test_initial_scale_without_and_with_the_fix():
    """N(0,1) value weights grow the unfixed output with depth; the fix removes the mean direction
    and keeps it small."""
    config = training.TrainConfig(
        T=16, d=16, depth=4, attention="markov", n_samples=5, steps=0, dtype="float64"
    )
    losses = training.train(config, [0, 1, 2], [0.01])[0, :, 0]
    assert (losses[:, 0] > 10 * losses[:, 1]).all()


def test_targets():
    x = torch.tensor([-1.0, -0.1, 0.0, 0.1])
    assert training.target(x, "heaviside").tolist() == [0.0, 0.0, 0.0, 1.0]
    assert training.target(x, "heaviside_centred").tolist() == [-0.5, -0.5, -0.5, 0.5]
    torch.testing.assert_close(training.target(x, "sigmoid"), torch.sigmoid(20 * (x + 0.5)))


def test_scaled_value_init_is_the_same_draw_divided_by_sqrt_d():
    normal = training.init_weights(small(attention="markov"), 0)
    scaled = training.init_weights(small(attention="markov", value_init="scaled"), 0)
    torch.testing.assert_close(scaled["W_V"], normal["W_V"] / 6**0.5)
    assert torch.equal(scaled["logits"], normal["logits"])
    frozen = training.init_weights(small(attention="markov", attention_weights="frozen"), 0)
    assert all(torch.equal(frozen[k], normal[k]) for k in normal)


def test_best_lr_and_paired_ci():
    final = torch.tensor(
        [[[1.0, 2.0], [0.5, math.nan]], [[1.0, 2.0], [0.7, math.inf]]]
    )  # (S=2, lr=2, fix=2)
    assert training.best_lr(final).tolist() == [1, 0]
    rng = np.random.default_rng(0)
    plain = rng.uniform(1, 2, 5)
    fixed = plain * np.exp(rng.normal(-0.3, 0.1, 5))
    ratio, lo, hi = training.paired_ratio_ci(fixed, plain)
    r = np.log(fixed / plain)
    half = stats.t.ppf(0.975, 4) * r.std(ddof=1) / math.sqrt(5)
    assert ratio == pytest.approx(math.exp(r.mean()))
    assert (lo, hi) == pytest.approx((math.exp(r.mean() - half), math.exp(r.mean() + half)))
    assert math.isnan(training.paired_ratio_ci([1.0, math.nan], [1.0, 1.0])[0])


def test_bad_inputs():
    with pytest.raises(ParameterError, match="attention must be one of markov, normal, xavier"):
        training.TrainConfig(T=4, d=4, depth=1, attention="identity")
    with pytest.raises(ParameterError, match="attention_weights must be one of trainable, frozen"):
        training.TrainConfig(T=4, d=4, depth=1, attention_weights="fixed")
    with pytest.raises(ParameterError, match="depth must be an int >= 1"):
        training.TrainConfig(T=4, d=4, depth=0)
    with pytest.raises(ParameterError, match="lr must be a number > 0"):
        training.train(small(), [0], [0.0])
    with pytest.raises(ParameterError, match="seed must be an int >= 0 or a non-empty sequence"):
        training.train(small(), [], [0.1])


def test_grid_summary_and_benefit():
    runs = training.run_grid(
        ["markov", "xavier"],
        [1, 2],
        [0, 1, 2],
        [0.01, 0.1],
        T=6,
        d=6,
        n_samples=3,
        steps=4,
        dtype="float64",
    )
    assert set(runs) == {("markov", 1), ("markov", 2), ("xavier", 1), ("xavier", 2)}
    table = training.summary(runs, [0.01, 0.1])
    losses = runs[("xavier", 2)]
    for j, fix in enumerate((False, True)):
        b = int(training.best_lr(losses[-1])[j])
        row = table.loc[("xavier", 2, fix)]
        assert row["best lr"] == [0.01, 0.1][b]
        assert row["final"] == pytest.approx(losses[-1, :, b, j].mean().item())
        assert row["final / initial"] == pytest.approx(
            (losses[-1, :, b, j] / losses[0, :, b, j]).mean().item()
        )
    gains = training.benefit(runs)
    b0, b1 = training.best_lr(losses[-1]).tolist()
    expected = training.paired_ratio_ci(losses[-1, :, b1, 1].numpy(), losses[-1, :, b0, 0].numpy())
    assert tuple(gains.loc[("xavier", 2), ["ratio", "ci low", "ci high"]]) == pytest.approx(
        expected
    )
    assert gains.loc[("xavier", 2), "benefit claimed"] == (expected[2] < 0.95)
