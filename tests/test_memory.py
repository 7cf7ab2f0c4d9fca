"""The Recurrent Memory Transformer toy: its steps, the memory as the only path between
segments, its unrolled network and graph."""

import math

import numpy as np
import pytest
import torch

from collapse import masks, memory, metrics, san, theory
from collapse.checks import ParameterError

CONFIG = san.SANConfig(d=8, n_layers=3, init="orthogonal_v")
SEEDS = [0, 1]


def _inputs(segments=3, segment=5, n_memory=2, d=8):
    X = theory.gaussian_tokens(SEEDS, segments * segment, d).reshape(2, segments, segment, d)
    return X, theory.gaussian_tokens([7, 8], n_memory, d)


def test_layouts_of_the_decoder_and_the_encoder():
    decoder, encoder = memory.Layout(5, 2), memory.Layout(5, 2, decoder=False)
    M, X = torch.zeros(1, 2, 3), torch.ones(1, 5, 3)
    assert decoder.inputs(M, X)[0, :, 0].tolist() == [0, 0, 1, 1, 1, 1, 1, 0, 0]
    assert encoder.inputs(M, X)[0, :, 0].tolist() == [0, 0, 1, 1, 1, 1, 1]
    assert torch.equal(decoder.mask(), masks.make("causal", 9))
    assert torch.equal(encoder.mask(), masks.make("complete", 7))
    with pytest.raises(ParameterError, match="memory must be an int >= 1"):
        memory.Layout(5, 0)


@pytest.mark.parametrize("decoder", [True, False])
def test_the_first_step_is_the_toy_network_on_memory_and_segment(decoder):
    layout = memory.Layout(5, 2, decoder=decoder)
    X, M0 = _inputs()
    out = memory.run(X, M0, CONFIG, layout, SEEDS, d_qk=1.0)
    step = san.simulate(
        layout.inputs(M0, X[:, 0]), CONFIG, mask=layout.mask(), d_qk=1.0, seed=SEEDS
    )
    scale = float(step["mu"][0].max())  # the encoder's mu falls to rounding: compare to mu(0)
    np.testing.assert_allclose(out["mu"][:, 0], step["mu"].numpy(), rtol=1e-9, atol=1e-12 * scale)
    torch.testing.assert_close(out["outputs"][:, 0], step.final[:, layout.tokens])
    torch.testing.assert_close(out["memory"][1], step.final[:, layout.write])
    assert out["mu"].shape == (4, 3, 2) and out["epsilon"].shape == (2,)
    assert (out["epsilon"] > 0).all() and (out["epsilon"] <= 1).all()


@pytest.mark.parametrize("decoder", [True, False])
def test_the_memory_is_the_only_path_between_segments(decoder):
    """Segment k's outputs follow from its own tokens and the memory it reads alone: run from
    that memory, with the earlier segments dropped, they are the same."""
    layout = memory.Layout(5, 2, decoder=decoder)
    X, M0 = _inputs()
    out = memory.run(X, M0, CONFIG, layout, SEEDS, d_qk=1.0)
    for k in (1, 2):
        alone = memory.run(X[:, k:], out["memory"][k], CONFIG, layout, SEEDS, d_qk=1.0)
        torch.testing.assert_close(alone["outputs"], out["outputs"][:, k:], rtol=0, atol=0)
    other = X.clone()
    other[:, 0] = theory.gaussian_tokens([5, 6], 5, 8)
    changed = memory.run(other, M0, CONFIG, layout, SEEDS, d_qk=1.0)
    assert not torch.equal(changed["outputs"][:, 1], out["outputs"][:, 1])  # through memory


def test_the_encoder_is_its_unrolled_network_up_to_the_value_matrices():
    """Run as one network over [memory, segments] with the unrolled masks and the L layers
    repeated, a segment outside its step attends to itself alone and is turned by
    R = W_V^(1) ... W_V^(L) once per step: with segment k's inputs turned back by R^k, the
    network leaves it as its RMT output times R once per later step."""
    layout = memory.Layout(5, 2, decoder=False)
    X, M0 = _inputs()
    out = memory.run(X, M0, CONFIG, layout, SEEDS, d_qk=1.0)
    layers = list(san.init_layers(CONFIG, SEEDS))
    R = memory.value_product(CONFIG, SEEDS)
    power = [torch.linalg.matrix_power(R, k) for k in range(3)]
    turned_back = [X[:, k] @ power[k].transpose(-1, -2) for k in range(3)]  # R^-k = (R^k)^T
    big = torch.cat([M0, *turned_back], dim=1)
    sequence = memory.unrolled_masks(layout, 3, CONFIG.n_layers)
    final = san.simulate(
        big, CONFIG, mask=sequence, d_qk=1.0, seed=SEEDS, weights=layers * 3
    ).final
    torch.testing.assert_close(final[:, :2], out["memory"][-1])
    for k in range(3):
        segment = final[:, 2 + 5 * k : 7 + 5 * k]
        torch.testing.assert_close(segment, out["outputs"][:, k] @ power[2 - k])


def test_value_product_is_the_layers_value_matrices_in_order():
    layers = list(san.init_layers(CONFIG, SEEDS))
    R = memory.value_product(CONFIG, SEEDS)
    torch.testing.assert_close(R, layers[0].W_V @ layers[1].W_V @ layers[2].W_V)
    eye = torch.eye(8, dtype=torch.float64).expand(2, 8, 8)
    torch.testing.assert_close(R @ R.transpose(-1, -2), eye)  # orthogonal values


def test_seen_so_far_splits_mu_by_segment():
    X, _ = _inputs(segments=4)
    parts = memory.seen_so_far(X)
    assert parts["mu"].shape == (4, 2)
    np.testing.assert_allclose(parts["within"] ** 2 + parts["between"] ** 2, parts["mu"] ** 2)
    np.testing.assert_allclose(parts["between"][0], 0, atol=1e-15)
    np.testing.assert_allclose(parts["mu"][-1], metrics.mu(X.flatten(1, 2)).numpy())


@pytest.mark.parametrize("segments, layers", [(1, 1), (2, 3), (4, 12)])
def test_unrolled_radius_is_every_step_but_the_last_and_one_layer(segments, layers):
    for decoder in (True, False):
        sequence = memory.unrolled_masks(memory.Layout(4, 2, decoder), segments, layers)
        radius, centers = memory.unrolled_radius(sequence)
        assert radius == (segments - 1) * layers + 1
        # the decoder's first memory token sees itself alone; the encoder's memory and first
        # segment see each other and reach every later segment through the memory
        assert centers == ([0] if decoder else list(range(6)))


def test_unrolled_masks_keep_finished_and_future_segments_to_themselves():
    layout = memory.Layout(2, 1)
    sequence = memory.unrolled_masks(layout, 3, n_layers=2)
    assert len(sequence) == 6 and sequence[0] is sequence[1]
    step_one = sequence[2]  # tokens 3 (read memory), 4, 5 (segment) and 6 (write memory)
    assert torch.equal(step_one[3:7, 3:7], masks.make("causal", 4))
    outside = [0, 1, 2, 7, 8, 9]
    assert torch.equal(step_one[outside][:, outside], torch.eye(6, dtype=torch.bool))
    assert memory.unrolled_radius([torch.eye(3, dtype=torch.bool)] * 4) == (math.inf, [])
