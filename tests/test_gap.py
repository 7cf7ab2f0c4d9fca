import math

import pytest
import torch

from collapse import gap, metrics
from collapse.checks import ParameterError


@pytest.mark.parametrize("T, d", [(20, 20), (20, 100), (100, 20)])
def test_isometric_input_is_a_slice_of_an_orthogonal_matrix(T, d):
    X = gap.isometric_input(T, d, generator=torch.Generator().manual_seed(0))
    gram = X @ X.mT if d >= T else X.mT @ X
    torch.testing.assert_close(gram, torch.eye(min(T, d), dtype=torch.float64))
    assert metrics.stable_rank(X).item() == pytest.approx(min(T, d))


def test_keyquery_logit_scales():
    """PAPERS M6: Xavier logits have std ~1/d, N(0,1) logits std ~1, so A(X) ~ 11^T/T or Markov-like."""
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
    X, W = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(4, 4, generator=g, dtype=torch.float64)
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
        torch.testing.assert_close(batched["gram_stable_rank"][:, i], alone["gram_stable_rank"][:, 0], rtol=1e-10, atol=0)
    again = gap.simulate(config, [3, 7], metrics=("stable_rank", "gram_stable_rank"))
    assert torch.equal(batched["stable_rank"], again["stable_rank"])


def test_rank_collapse_in_width_and_its_fix():
    """One Markov layer: sr(XX^T) ~ 1 without the fix, grows with T with it (PAPERS M4)."""
    plain = [gap.simulate(gap.GapConfig(T=T, d=T, n_layers=1), range(3))["gram_stable_rank"][1].mean().item() for T in (20, 80)]
    fixed = [gap.simulate(gap.GapConfig(T=T, d=T, n_layers=1, fix=True), range(3))["gram_stable_rank"][1].mean().item() for T in (20, 80)]
    assert max(plain) < 1.2
    assert fixed[1] > 2 * fixed[0] > 2 * plain[0]
    assert math.isclose(gap.simulate(gap.GapConfig(T=20, d=20, n_layers=0), 0)["gram_stable_rank"][0, 0].item(), 20)


def test_labels_and_bad_inputs():
    assert gap.GapConfig(T=4, d=4, n_layers=1, fix=True, skip=True, layernorm=True).label == "A⊥+skip+LN"
    assert gap.GapConfig(T=4, d=4, n_layers=1, attention="identity").label == "Identity A"
    with pytest.raises(ParameterError, match="attention must be one of markov, identity, xavier, normal"):
        gap.GapConfig(T=4, d=4, n_layers=1, attention="random")
    with pytest.raises(ParameterError, match="n_layers must be an int >= 0"):
        gap.GapConfig(T=4, d=4, n_layers=-3)
    with pytest.raises(ParameterError, match="seeds must name at least one seed"):
        gap.simulate(gap.GapConfig(T=4, d=4, n_layers=1), [])
