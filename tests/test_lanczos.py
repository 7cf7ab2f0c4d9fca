"""The Lanczos solver: the top singular values of large matrices, batched, restarted, in mixed
precision, against dense SVD and ARPACK."""

import warnings

import pytest
import torch

from collapse import lanczos, markov


@pytest.mark.parametrize("shape, k", [((700, 700), 6), ((2, 600, 650), 3)])
def test_iterative_top_singular_values_agree_with_full_svd(shape, k):
    g = torch.Generator().manual_seed(3)
    A = torch.randn(*shape, generator=g, dtype=torch.float64)
    full = lanczos.top_singular_values(A, k, method="full")
    iterative = lanczos.top_singular_values(A, k, method="iterative")
    assert iterative.shape == full.shape == (*shape[:-2], k)
    torch.testing.assert_close(iterative, full, rtol=0, atol=1e-8)


def test_iterative_on_markov_resolves_the_outlier_and_the_bulk_edge():
    A = markov.random_markov(800, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(
        lanczos.top_singular_values(A, 4), torch.linalg.svdvals(A)[:4], rtol=0, atol=1e-8
    )


def _markov(T, seed, batch=()):
    return markov.random_markov(T, generator=torch.Generator().manual_seed(seed), batch=batch)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_lanczos_agrees_with_full_svd_to_1e8_on_markov_matrices(k):
    """The accuracy target: the iterative values equal the dense SVD's to 1e-8 (sigma_1 ~ 1
    here)."""
    A = _markov(1024, 5)
    values, info = lanczos.lanczos_singular_values(A, k)
    assert info["converged"] and values.shape == (k,)
    torch.testing.assert_close(values, torch.linalg.svdvals(A)[:k], rtol=0, atol=1e-8)
    torch.testing.assert_close(
        lanczos.top_singular_values(A, k, method="lanczos"), values, rtol=0, atol=0
    )


def test_lanczos_is_cheap_and_deterministic():
    """sigma_1, sigma_2 of a 2048 x 2048 Markov matrix in well under T/10 products (a full SVD is
    ~T^3 work); same seed, same bits."""
    A = _markov(2048, 6)
    values, info = lanczos.lanczos_singular_values(A, 2)
    assert info["passes"] <= 120, info
    again, _ = lanczos.lanczos_singular_values(A, 2)
    assert torch.equal(values, again)
    other, _ = lanczos.lanczos_singular_values(A, 2, seed=1)
    torch.testing.assert_close(other, values, rtol=0, atol=1e-8)


def test_isolated_outlier_is_certified_by_its_residual():
    """sigma_1 ~ 1 sits far above the bulk (~2/sqrt(T)): a handful of steps certify it, residual <=
    tol."""
    values, info = lanczos.lanczos_singular_values(_markov(1500, 7), 1, tol=1e-12)
    assert info["certified"] and info["residual"] <= 1e-12 and info["passes"] <= 20
    assert values.item() == pytest.approx(1 + 0.5 / 1500, abs=2e-4)


@pytest.mark.parametrize(
    "shape, k, block, max_dim",
    [((2, 600, 650), 3, 1, None), ((650, 600), 4, 1, 24), ((500, 500), 3, 4, None)],
)
def test_lanczos_general_matrices_batches_restarts_and_blocks(shape, k, block, max_dim):
    """Gaussian matrices (no outlier), both orientations, a batch, thick restarts (max_dim small)
    and blocks."""
    A = torch.randn(*shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    values, info = lanczos.lanczos_singular_values(A, k, block=block, max_dim=max_dim)
    full = torch.linalg.svdvals(A)[..., :k]
    assert info["converged"] and values.shape == full.shape
    torch.testing.assert_close(values, full, rtol=0, atol=1e-8 * full[..., :1].max().item())
    if max_dim is not None:
        assert info["dim"] <= max_dim and info["steps"] > max_dim  # it did restart


def test_lanczos_on_degenerate_matrices():
    zero, info = lanczos.lanczos_singular_values(torch.zeros(50, 50), 2)
    assert torch.equal(zero, torch.zeros(2, dtype=torch.float64)) and info["certified"]
    uniform, info = lanczos.lanczos_singular_values(
        torch.full((600, 600), 1 / 600, dtype=torch.float64), 2
    )
    torch.testing.assert_close(
        uniform, torch.tensor([1.0, 0.0], dtype=torch.float64), rtol=0, atol=1e-12
    )
    small, info = lanczos.lanczos_singular_values(_markov(5, 1), 5)  # the whole space: exact
    torch.testing.assert_close(small, torch.linalg.svdvals(_markov(5, 1)), rtol=0, atol=1e-13)


@pytest.mark.parametrize("threads", [1, 2])
def test_lanczos_keeps_its_basis_orthonormal_at_a_breakdown(threads):
    """A rank-one A: every new Krylov vector is rounding inside the basis' span. How the product
    splits M decides that rounding; with two Gram-Schmidt rounds only, the split between two
    threads lost orthogonality step by step until sigma_1 came out as 5.2 (105 with others)."""
    from collapse.runtime import use_threads

    uniform = torch.full((3000, 3000), 1 / 3000, dtype=torch.float64)  # 2 parts at 2 threads
    with use_threads(threads):
        values, info = lanczos.lanczos_singular_values(
            uniform, 2, precision="double", max_steps=100
        )
    assert info["converged"]
    torch.testing.assert_close(
        values, torch.tensor([1.0, 0.0], dtype=torch.float64), rtol=0, atol=1e-12
    )


def test_lanczos_warns_when_it_runs_out_of_steps_and_keeps_threads():
    threads = torch.get_num_threads()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, info = lanczos.lanczos_singular_values(_markov(800, 2), 2, max_steps=4)
    assert not info["converged"] and any(
        "Lanczos stopped after 4 steps" in str(w.message) for w in caught
    )
    assert torch.get_num_threads() == threads


def test_settled_extrapolates_geometric_convergence_only():
    geometric = [torch.tensor([[1.0, 0.5 - 0.1 * 0.5**j]], dtype=torch.float64) for j in range(40)]
    assert lanczos._settled(geometric, 1e-9, 5).all()
    assert not lanczos._settled(geometric[:20], 1e-9, 5)[0, 1]  # still moving by ~1e-7
    steady = [
        torch.tensor([[1.0, 0.5 + 1e-10 * j]], dtype=torch.float64) for j in range(40)
    ]  # constant drift never settles
    assert not lanczos._settled(steady, 1e-9, 5)[0, 1]
    assert not lanczos._settled(geometric[:10], 1.0, 5).any()  # too short a history


def test_auto_uses_lanczos_for_large_matrices():
    A = _markov(600, 9, batch=(2,))
    auto = lanczos.top_singular_values(A, 2)
    torch.testing.assert_close(
        auto, lanczos.top_singular_values(A, 2, method="lanczos"), rtol=0, atol=0
    )
    torch.testing.assert_close(auto, torch.linalg.svdvals(A)[..., :2], rtol=0, atol=1e-8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_fused_gram_product_is_the_two_products(dtype):
    """M read once, its rows shared by two threads, four rows at a time and the rest one by one:
    the same (W, Z) as M V and M^T (M V), to rounding relative to |M| |V|; also for M stored
    column by column (a wide A's transpose, unfused)."""
    from collapse.runtime import use_threads

    g = torch.Generator().manual_seed(3)
    M = torch.rand(3003, 2900, generator=g, dtype=torch.float64).to(dtype)  # > 2 * 2**22
    V = torch.randn(2900, 3, generator=g, dtype=torch.float64).to(dtype)
    W64, Z64 = M.double() @ V.double(), M.double().mT @ (M.double() @ V.double())
    scale_w = (M.double().abs() @ V.double().abs()).max()
    scale_z = (M.double().abs().mT @ (M.double().abs() @ V.double().abs())).max()
    eps = torch.finfo(dtype).eps
    for threads in (1, 2):
        with use_threads(threads):
            W, Z = lanczos._gram_product(M, V)
        assert W.dtype == Z.dtype == dtype and W.shape == (3003, 3) and Z.shape == (2900, 3)
        assert (W.double() - W64).abs().max() <= 64 * eps * scale_w
        assert (Z.double() - Z64).abs().max() <= 64 * eps * scale_z
    Wf, Zf = lanczos._gram_product(M.mT.contiguous().mT, V)
    assert (Wf.double() - W64).abs().max() <= 64 * eps * scale_w
    assert (Zf.double() - Z64).abs().max() <= 64 * eps * scale_z
    Wb, Zb = lanczos._gram_product(M[None], V)  # the batched (and GPU) path: unfused
    assert (Zb[0].double() - Z64).abs().max() <= 64 * eps * scale_z
    assert (Wb[0].double() - W64).abs().max() <= 64 * eps * scale_w


def _gaussian(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("T, k", [(512, 2), (1024, 2), (1024, 5)])
def test_mixed_precision_reaches_float64_accuracy(T, k):
    """float32 Krylov steps, float64 refinement: within 1e-11 sigma_1 of the dense SVD, which the
    float32 Ritz values alone miss (they are ~1e-8 off); and as accurate as float64 steps."""
    A = _markov(T, 20 + k)
    full = torch.linalg.svdvals(A)[:k]
    mixed, info = lanczos.lanczos_singular_values(A, k, tol=1e-11)
    assert info["precision"] == "mixed" and info["converged"] and mixed.dtype == torch.float64
    assert (mixed - full).abs().max() <= 1e-11 * full[0]
    double, info64 = lanczos.lanczos_singular_values(A, k, tol=1e-11, precision="double")
    assert info64["precision"] == "double" and (double - full).abs().max() <= 1e-11 * full[0]
    assert info["bytes"] == info["steps"] * T * T * 4 + T * T * 8  # float32 steps, one float64
    assert info64["bytes"] == info64["steps"] * T * T * 8


@pytest.mark.parametrize("shape, k, block", [((2, 700, 650), 3, 1), ((900, 900), 4, 2)])
def test_mixed_precision_on_batches_blocks_and_clusters(shape, k, block):
    """Gaussian matrices: no outlier, the top values close together (a pair sigma_k ~ sigma_(k+1)
    is what the refinement's extra vector is for)."""
    A = _gaussian(shape, 21)
    full = torch.linalg.svdvals(A)[..., :k]
    values, info = lanczos.lanczos_singular_values(A, k, block=block)
    assert info["precision"] == "mixed" and info["converged"] and values.shape == full.shape
    assert (values - full).abs().max() <= 1e-9 * full[..., 0].min()


def test_refinement_resolves_a_close_pair_at_the_kth_value():
    """sigma_2 - sigma_3 = 1e-6 sigma_1: float32 rounding mixes their Ritz vectors; refining the
    top k + 1 of them together (not k) still gives sigma_2 to ~1e-13."""
    g = torch.Generator().manual_seed(23)
    Q1, Q2 = (
        torch.linalg.qr(torch.randn(400, 400, generator=g, dtype=torch.float64)).Q for _ in "ab"
    )
    s = torch.linspace(0.4, 0.0, 400, dtype=torch.float64)
    s[:3] = torch.tensor([1.0, 0.7, 0.7 - 1e-6])
    values, info = lanczos.lanczos_singular_values(Q1 @ torch.diag(s) @ Q2.mT, 2)
    assert info["precision"] == "mixed" and (values - s[:2]).abs().max() <= 1e-12


def test_mixed_precision_falls_back_to_double_out_of_float32_reach():
    """tol below 1e-11, or sigma_k below 1e-3 sigma_1 (here exactly 0): float64 products."""
    A = _markov(600, 22)
    assert lanczos.lanczos_singular_values(A, 2, tol=1e-12)[1]["precision"] == "double"
    uniform = torch.full((600, 600), 1 / 600, dtype=torch.float64)
    values, info = lanczos.lanczos_singular_values(uniform, 2)
    assert info["precision"] == "double" and info["bytes"] > info["steps"] * 600 * 600 * 8
    torch.testing.assert_close(
        values, torch.tensor([1.0, 0.0], dtype=torch.float64), rtol=0, atol=1e-12
    )
