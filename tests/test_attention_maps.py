"""The attention maps read as implicit fixes of the spectral gap, on small cases: row sums, the
eigenvector 1, and equality with a direct formula written head by head."""

import math

import pytest
import torch

from collapse import attention_maps as maps
from collapse import markov, masks
from collapse.checks import ParameterError


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_lambda_init_schedule():
    assert maps.lambda_init(1) == pytest.approx(0.2)
    assert maps.lambda_init(2) == pytest.approx(0.8 - 0.6 * math.exp(-0.3))
    assert maps.lambda_init(100) == pytest.approx(0.8, abs=1e-12)
    values = [maps.lambda_init(layer) for layer in range(1, 30)]
    assert all(a < b for a, b in zip(values, values[1:], strict=False))
    with pytest.raises(ParameterError, match="layer must be an int >= 1"):
        maps.lambda_init(0)


def test_differential_lambda_formula():
    a, b, c, e = (torch.randn(8, generator=gen(s), dtype=torch.float64) for s in range(4))
    want = math.exp(float(a @ b)) - math.exp(float(c @ e)) + 0.3
    assert float(maps.differential_lambda(a, b, c, e, 0.3)) == pytest.approx(want)
    zero = torch.zeros(8, dtype=torch.float64)
    assert float(maps.differential_lambda(zero, zero, zero, zero, 0.8)) == pytest.approx(0.8)


@pytest.mark.parametrize("lam", [0.0, 0.2, 0.8])
def test_differential_map_keeps_the_ones_vector(lam):
    A1 = markov.random_markov(50, generator=gen(1))
    A2 = markov.random_markov(50, generator=gen(2))
    D = maps.differential_map(A1, A2, lam)
    ones = torch.ones(50, dtype=torch.float64)
    torch.testing.assert_close(D @ ones, (1 - lam) * ones)
    torch.testing.assert_close(maps.differential_map(A1, A2, 0.0), A1)


def test_differential_map_batched_lambda():
    A1 = markov.random_markov(6, generator=gen(3), batch=(3,))
    A2 = markov.random_markov(6, generator=gen(4), batch=(3,))
    lam = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    D = maps.differential_map(A1, A2, lam)
    for i in range(3):
        torch.testing.assert_close(D[i], A1[i] - lam[i] * A2[i])
    with pytest.raises(ParameterError, match="A2 must be"):
        maps.differential_map(A1, A2[..., :5, :5], 0.5)


def direct_differential(X, w, n_heads, mask=None):
    """The reference code's layer, head by head: split queries and keys in halves, two
    softmax maps, subtract, RMSNorm the head, scale by 1 - lam_init, concatenate, project."""
    T, d = X.shape
    hd = d // (2 * n_heads)
    Q, K, V = X @ w.W_Q, X @ w.W_K, X @ w.W_V
    lam = math.exp(float(w.lam_q1 @ w.lam_k1)) - math.exp(float(w.lam_q2 @ w.lam_k2)) + w.lam_init
    outputs = []
    for h in range(n_heads):
        halves = []
        for j in (2 * h, 2 * h + 1):
            S = Q[:, j * hd : (j + 1) * hd] @ K[:, j * hd : (j + 1) * hd].T / math.sqrt(hd)
            if mask is not None:
                S = S.masked_fill(~mask, -math.inf)
            halves.append(torch.softmax(S, dim=-1))
        head = (halves[0] - lam * halves[1]) @ V[:, 2 * h * hd : (2 * h + 2) * hd]
        rms = torch.sqrt((head**2).mean(-1, keepdim=True) + 1e-5)
        outputs.append(head / rms * w.subln_weight * (1 - w.lam_init))
    return torch.cat(outputs, dim=-1) @ w.W_O


@pytest.mark.parametrize("n_heads", [1, 2])
@pytest.mark.parametrize("masked", [False, True])
def test_differential_attention_equals_the_direct_formula(n_heads, masked):
    w = maps.init_differential(8, n_heads, layer=3, seed=1)
    X = torch.randn(5, 8, generator=gen(5), dtype=torch.float64)
    mask = masks.make("causal", 5) if masked else None
    out, heads = maps.differential_attention(X, w, n_heads, mask)
    torch.testing.assert_close(out, direct_differential(X, w, n_heads, mask))
    assert heads.shape == (n_heads, 5, 5)
    lam = maps.differential_lambda(w.lam_q1, w.lam_k1, w.lam_q2, w.lam_k2, w.lam_init)
    torch.testing.assert_close(heads.sum(-1), (1 - lam) * torch.ones(n_heads, 5, dtype=X.dtype))
    if masked:
        assert (heads[..., ~mask] == 0).all()
    batched, _ = maps.differential_attention(X.expand(3, -1, -1), w, n_heads, mask)
    torch.testing.assert_close(batched, out.expand(3, -1, -1))


def test_init_differential_follows_the_reference():
    w = maps.init_differential(16, 2, layer=1, seed=0)
    assert w.lam_init == pytest.approx(0.2)
    assert w.W_Q.shape == (16, 16) and w.lam_q1.shape == (4,) and w.subln_weight.shape == (8,)
    assert w.W_Q.abs().max() <= 1 / math.sqrt(16) and torch.equal(w.subln_weight, torch.ones(8))
    again = maps.init_differential(16, 2, layer=1, seed=0)
    assert torch.equal(w.W_Q, again.W_Q) and torch.equal(w.lam_k2, again.lam_k2)
    assert not torch.equal(w.W_Q, w.W_K) and not torch.equal(w.lam_q1, w.lam_q2)
    assert not torch.equal(w.W_Q, maps.init_differential(16, 2, layer=2, seed=0).W_Q)
    lams = torch.cat([maps.init_differential(64, 1, 1, seed=s).lam_q1 for s in range(50)])
    assert lams.std().item() == pytest.approx(0.1, rel=0.15)
    with pytest.raises(ParameterError, match="multiple of 2 \\* n_heads = 4"):
        maps.init_differential(6, 2, layer=1)


def test_sigmoid_map():
    S = torch.randn(7, 7, generator=gen(6), dtype=torch.float64)
    torch.testing.assert_close(maps.sigmoid_map(S), 1 / (1 + torch.exp(-(S - math.log(7)))))
    zero = maps.sigmoid_map(torch.zeros(4, 4, dtype=torch.float64))
    torch.testing.assert_close(zero.sum(-1), torch.full((4,), 4 / 5, dtype=torch.float64))
    mask = masks.make("causal", 7)
    masked = maps.sigmoid_map(S, mask)
    assert (masked[~mask] == 0).all() and torch.equal(masked[mask], maps.sigmoid_map(S)[mask])
    rows = maps.sigmoid_map(S).sum(-1)
    assert not torch.allclose(rows, torch.ones_like(rows))  # rows are not normalised
    torch.testing.assert_close(maps.sigmoid_map(S, bias=0.0), torch.sigmoid(S))
    with pytest.raises(ParameterError, match="does not match"):
        maps.sigmoid_map(S, masks.make("causal", 6))


def test_centred_map_is_the_fix_without_a_mask_and_centres_each_row_with_one():
    from collapse import attention

    A = markov.random_markov(9, generator=gen(7), batch=(2,))
    assert torch.equal(maps.centred_map(A), attention.remove_outlier(A))
    torch.testing.assert_close(maps.centred_map(A).sum(-1), torch.zeros(2, 9, dtype=A.dtype))
    mask = masks.make("causal", 9)
    S = torch.randn(9, 9, generator=gen(8), dtype=torch.float64)
    masked = attention.masked_softmax(S, mask)
    centred = maps.centred_map(masked, mask)
    allowed = mask.to(torch.float64)
    torch.testing.assert_close(centred, masked - allowed / allowed.sum(-1, keepdim=True))
    torch.testing.assert_close(centred.sum(-1), torch.zeros(9, dtype=torch.float64))
    assert (centred[~mask] == 0).all()
    assert "centred" in maps.MAPS and maps.MAPS[0] == "softmax"
