"""Workload formulas of the chapters on Nait Saada, Naderi and Tanner (2025): random
attention's spectrum, rank in width and depth, gradients and training."""

from __future__ import annotations

from functools import partial

from ..cost import Work, dense_flops
from . import formula


@formula("spectral-gap")
def spectral_gap(n_seeds, T_values, fix_T, lanczos_T, timing_T) -> Work:
    """Dense spectra of random Markov matrices and of the fix, and Lanczos at large T."""
    svd, eig = (partial(dense_flops, kind) for kind in ("svdvals", "eigvals"))
    # dense spectra of A, then of A-perp (the fix)
    dense = sum(n_seeds * (svd(T) + eig(T)) for T in {*T_values, *fix_T})
    dense += sum(n_seeds * (svd(T) + eig(T)) for T in fix_T)
    # sigma_1, sigma_2 by Lanczos: ~ 200 products with A or A^T (2 T^2 each, mostly float32),
    # and drawing A (~ 10 T^2); plus the dense SVD it is timed against
    lanczos = sum(n_seeds * 410 * T**2 for T in lanczos_T) + svd(timing_T) + 410 * timing_T**2
    big = max(lanczos_T + [timing_T])
    return Work(
        flops=dense + lanczos,
        # the larger of: every dense A kept (with its complex eigenvalues), and one Lanczos
        # matrix with its float32 copy and the temporaries of its draw
        peak_bytes=max(
            sum(8 * n_seeds * (T**2 + 3 * T) for T in {*T_values, *fix_T}), 8 * 3.5 * big**2
        ),
    )


@formula("key-query")
def key_query(n_seeds, kq_T, gammas, gamma_T) -> Work:
    """Key-query attention at T = d and over the gamma sweep, for two weight laws."""
    svd, qr = (partial(dense_flops, kind) for kind in ("svdvals", "qr"))
    # X from a QR, X W_Q, X W_K, scores; svdvals (x2 at the largest T, for the figure and
    # its random Markov comparison), at T = d and over the gamma sweep (svdvals twice)
    flops = sum(
        2 * n_seeds * (qr(T) + 6 * T**3 + svd(T) * (2 if max(kq_T) == T else 1)) for T in kq_T
    )
    for gamma in gammas:
        d = max(1, round(gamma_T / gamma))
        flops += 2 * n_seeds * (qr(max(gamma_T, d)) + 6 * gamma_T * d**2 + 2 * svd(gamma_T))
    # the largest draw: the QR of a max(T, d) square matrix and the maps of every seed
    side = max([*kq_T, *(max(gamma_T, round(gamma_T / g)) for g in gammas)])
    return Work(flops=flops, peak_bytes=8 * (3 * side**2 + 2 * n_seeds * max(kq_T) ** 2))


@formula("width")
def width(T_values, gammas, n_layers, n_seeds, max_width) -> Work:
    """One layer after another of eight attention variants over the (T, gamma) grid, with the
    Gram matrix's spectrum at every layer."""
    from .. import gap

    # the attention of each variant (Markov with and without the fix, key-query N(0, 1)
    # with and without, identity, Xavier three times); the counter needs no more of them
    kinds = ["markov"] * 2 + ["normal"] * 2 + ["identity"] + ["xavier"] * 3
    cells = [
        (T, gap.width_for(T, g))
        for g in gammas
        for T in T_values
        if gap.width_for(T, g) <= max_width
    ]
    sweep = gap.width_sweep_flops(
        {k: {"attention": a} for k, a in enumerate(kinds)},
        T_values,
        gammas,
        n_layers=n_layers,
        n_seeds=n_seeds,
        max_width=max_width,
    )
    return Work(
        # A X, X W (and X W_Q, X W_K, scores) and the Gram X X^T, per layer, variant and
        # seed; then, not in that counter, eigvalsh of the Gram matrix (4/3 T^3) at every
        # layer from 0 and the Haar input X_0 of each cell and seed (a QR with its Q, 8/3 d^3)
        flops=sweep
        + sum(
            n_seeds * (len(kinds) * (n_layers + 1) * 4 / 3 * T**3 + 8 / 3 * d**3)
            for T, d in cells
        ),
        # the widest cell: every variant's states (and a temporary each) for every seed, with
        # each seed's d x d weights and the QR of its input
        peak_bytes=max(
            (8 * n_seeds * (2 * len(kinds) * T * d + 3 * d * d) for T, d in cells), default=0
        ),
    )


@formula("width-masks")
def width_masks(mask_T, mask_seeds) -> Work:
    """One masked layer per mask (complete, causal, sliding window, sink window), T and seed,
    with its outliers counted and removed."""
    from .. import gap_masks

    return Work(
        flops=gap_masks.masked_width_flops(4, mask_T, mask_seeds),
        # at the largest T: the seeds' X_0, logits, W, A, its SVD (U, V), the deflated and
        # centred maps and a layer
        peak_bytes=8 * 10 * mask_seeds * max(mask_T) ** 2,
    )


@formula("depth")
def depth(T, d, n_layers, n_seeds, spread_seeds) -> Work:
    """Nine attention stacks in depth at the main size, then the seed study at 150 x 150."""

    def per_run(T, d):
        # one seed through the nine stacks: A X, X W and the Gram X X^T per layer, eigvalsh of
        # the Gram matrix (4/3 T^3) at every layer from 0; the Haar input's QR (8/3 n^3) once
        return 9 * (n_layers * (4 * T * T * d + 2 * T * d * d) + (n_layers + 1) * 4 / 3 * T**3) + (
            8 / 3 * max(T, d) ** 3
        )

    return Work(
        # the main figure, then the seed study at 150 x 150
        flops=n_seeds * per_run(T, d) + spread_seeds * per_run(150, 150),
        # a batch of seeds (all of the main run, 25 of the study): the nine stacks' states
        # with a temporary each, and each seed's weights and attention
        peak_bytes=8
        * max(
            n_seeds * (18 * T * d + d * d + T * T),
            min(25, spread_seeds) * (18 + 2) * 150 * 150,
        ),
    )


@formula("implicit-fixes")
def implicit_fixes(n_seeds, lams, T_values, kq_T, many_seeds, many_full_T) -> Work:
    """The first-layer maps' spectra and the verdicts' small Markov spectra, for the implicit
    fixes."""
    maps = 5 + len(lams)  # softmax, A⊥, centred, sigmoid, differential; the fixed lambdas

    # the first-layer maps' spectra: sigma_1 of each map and of its bulk, every T and seed;
    # the key-query maps first draw X_0 (a QR with its Q, 8/3 T^3), X W_Q, X W_K and scores
    flops = n_seeds * sum(2 * maps * _top(T) for T in [*T_values, *kq_T])
    flops += n_seeds * sum(8 / 3 * T**3 + 6 * T**3 for T in kq_T)

    def many(t):
        # seeds of the verdicts' small Markov spectra at T = t: all up to many_full_T, then fewer
        if t <= many_full_T:
            return many_seeds
        return min(many_seeds, max(20, -(-many_seeds * many_full_T**2 // t**2)))

    # those spectra: each fixed lambda up to 2 T* = 8 (1 + lam^2) / (1 - lam)^2, softmax and
    # the first layer's differential map up to many_full_T, and the two for key-query scores
    flops += sum(many(t) * (2 * 2 * _top(t) + 8 / 3 * t**3 + 6 * t**3) for t in kq_T)
    flops += sum(
        many(t)
        * 2
        * _top(t)
        * (sum(t <= 8 * (1 + lam**2) / (1 - lam) ** 2 for lam in lams) + 2 * (t <= many_full_T))
        for t in T_values
    )
    largest = max(T_values + kq_T)
    # the largest T: every map of one seed, the draws they share, Lanczos' float32 copy
    return Work(flops=flops, peak_bytes=8 * (maps + 3) * largest**2)


def _top(T):
    """sigma_1 of a T x T map: a dense SVD (8/3 T^3) below T = 512, else Lanczos (~ 200
    products of 2 T^2)."""
    return 8 / 3 * T**3 if T < 512 else 400 * T**2


@formula("fixes-in-networks")
def fixes_in_networks(
    width_T, width_kq_T, width_seeds, edge_T, depth_T, depth_seeds, n_layers, grad_variants,
    grad_Ts, grad_seeds,
) -> Work:
    """The key-query maps' edge constant, one layer in width, the stacks in depth and the
    gradient norms, for the implicit fixes in a network."""
    from .. import gap, gradients

    # the edge constant: sigma_1 of A⊥ and of its bulk at T = edge_T for each seed, after X_0
    # (a QR with its Q), X W_Q, X W_K and the scores
    flops = width_seeds * (2 * _top(edge_T) + 8 / 3 * edge_T**3 + 6 * edge_T**3)
    # one layer at width d = T, six maps per kind: the sweep's products and Gram matrices,
    # then eigvalsh at layers 0 and 1 (4/3 T^3 each) and the Haar input (8/3 T^3) per cell
    # and seed
    for kind, Ts in (("markov", width_T), ("normal", width_kq_T)):
        flops += gap.width_sweep_flops(
            dict.fromkeys(range(6), {"attention": kind}), Ts, [1.0], n_layers=1,
            n_seeds=width_seeds,
        ) + width_seeds * sum(6 * 2 * 4 / 3 * T**3 + 8 / 3 * T**3 for T in Ts)
    # depth: 4 maps x 4 module sets per kind at T = d = depth_T, eigvalsh at every layer from 0
    flops += gap.width_sweep_flops(
        dict.fromkeys(range(16), {"attention": "markov"})
        | dict.fromkeys(range(16, 32), {"attention": "normal"}),
        [depth_T],
        [1.0],
        n_layers=n_layers,
        n_seeds=depth_seeds,
    ) + depth_seeds * (32 * (n_layers + 1) * 4 / 3 * depth_T**3 + 2 * 8 / 3 * depth_T**3)
    # gradient norms at depth 2, four maps: autograd for key-query attention and for
    # LayerNorm (the Markov closed forms without LayerNorm are small)
    flops += 4 * sum(
        gradients.autograd_flops(T, T, 2, grad_seeds, kind == "normal")
        for kind in ("markov", "normal")
        for v in grad_variants
        for T in grad_Ts
        if kind == "normal" or "ln" in v
    )
    width = max(width_T + width_kq_T)
    # the larger of: the edge constant's map with its draws and Lanczos' float32 copy, and the
    # widest cell of the width sweep (six maps, each seed's X, A and W)
    return Work(flops=flops, peak_bytes=8 * max(4 * edge_T**2, 6 * 3 * width_seeds * width**2))


def _skip_closed_form(T, depth):
    """Markov + skip, closed form, one seed: the 2^(l-1) products A_S C and W_S and their
    Gram matrices at every layer l (d = T)."""
    return sum(4 * 4 ** (k - 1) * T**2 + 2 * 2 ** (k - 1) * T**3 for k in range(1, depth + 1))


@formula("gradients")
def gradients_norms(
    kinds, ln_variants, Ts, depths, n_seeds, closed_seeds, sweep_Ts, sweep_depths, device
) -> Work:
    """Autograd gradient norms of the main grid, with and without the fix, and the Markov
    closed forms of the depth sweep."""
    from .. import gradients

    # every autograd norm of the main grid (key-query kinds, and Markov with LayerNorm), with
    # and without the fix: T d backward passes per seed (d = T); when the main grid has no
    # N(0,1) key-query attention, Why it differs computes its plain configuration
    jobs = [
        (T, L, k != "markov")
        for k in kinds
        for v in ["plain", "skip", *ln_variants]
        for T in Ts
        for L in depths
        if k != "markov" or "ln" in v
    ]
    jobs += [(T, L, True) for T in Ts for L in depths if "normal" not in kinds]
    flops = 2 * sum(gradients.autograd_flops(T, T, L, n_seeds, kq) for T, L, kq in jobs)
    # the Markov closed forms (only the skip one grows with depth), with and without the fix,
    # in the main grid (when Markov is in it) and in the depth sweep
    flops += 2 * closed_seeds * sum(_skip_closed_form(T, max(sweep_depths)) for T in sweep_Ts)
    if "markov" in kinds:
        flops += 2 * closed_seeds * sum(_skip_closed_form(T, max(depths)) for T in Ts)
    # the autograd backward holds ~8 T x T tensors per layer and cotangent, in batches of
    # about 50 MB on a CPU (8 GB on a GPU); the skip closed form holds chunks of seeds of
    # <= 200 MB
    T, L = max(Ts), max(depths)
    per = 8 * 8 * T * T * L
    batch = max(1, min(T * T, max(32, int((5e7 if device == "cpu" else 8e9) // per))))
    subsets = 2 ** (max(sweep_depths) - 1) * 16 * max(sweep_Ts) ** 2  # one seed's products
    return Work(
        flops=flops,
        peak_bytes=max(
            batch * (per + 8 * T * T), min(closed_seeds, max(1, int(2e8 // subsets))) * subsets
        ),
    )


@formula("training")
def training_runs(T, n_samples, steps, target, dtype, n_seeds, lrs, kinds, depths) -> Work:
    """Forward and backward passes of every model trained: the main grid and the arms that
    freeze the logits, scale the value init or centre the target."""
    from .. import training

    task = dict(T=T, d=T, n_samples=n_samples, steps=steps, target=target, dtype=dtype)
    models = 2 * n_seeds * len(lrs)  # every (seed, lr, fix) trains at once
    arms = [k for k in ("markov", "normal") if k in kinds]
    # (kinds, depths, models, task changes): the main grid; Markov at depth 1 with the fix at
    # one lr (column sums); frozen logits, and frozen with the centred target; the scaled
    # value init at the deepest depth and the centred target at the shallowest
    runs = [
        (kinds, depths, models, {}),
        (["markov"], [1], n_seeds, {}),
        (["markov"], depths, models, {"attention_weights": "frozen"}),
        (["markov"], [min(depths)], models, {"attention_weights": "frozen"}),
        (arms, [max(depths)], models, {"value_init": "scaled"}),
        (arms, [min(depths)], models, {}),
    ]
    configs = [
        (training.TrainConfig(attention=k, depth=L, **{**task, **kw}), n)
        for ks, Ls, n, kw in runs
        for k in ks
        for L in Ls
    ]
    pair = max(2 * training.model_bytes(c) for c, _ in configs)  # a model with and without fix
    lr_step = max(1, min(len(lrs), int(2e9 // pair)))  # train()'s blocks of at most 2 GB
    return Work(
        # forward and backward (~3 forward) of every model, all steps
        flops=sum(training.train_flops(c, n) for c, n in configs),
        # the largest block of models training at once (activations kept for the backward)
        peak_bytes=pair * lr_step * max(1, min(n_seeds, int(2e9 // (pair * lr_step)))),
        dtype=dtype,
    )
