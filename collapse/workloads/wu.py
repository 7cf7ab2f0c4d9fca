"""Workload formulas of the chapters on Wu et al. (2024): masks, LayerNorm, SAN stacks."""

from __future__ import annotations

from ..cost import Work, grid_flops
from . import formula


@formula("mask-radius")
def mask_radius(
    n_tokens,
    d,
    n_layers,
    n_seeds,
    extra_masks,
    hypothesis_tokens,
    hypothesis_layers,
    res_sizes,
    res_samples,
    res_seeds,
    res_points,
) -> Work:
    """The toy network under every mask on every seed, batched, then the run without a
    center (one mask, N = d = hypothesis_tokens) that keeps every layer's tokens, and Dong et
    al.'s residual: random inputs of every size, and the paper's four masks run at that same
    small size, every layer kept, a few states of each solved."""
    from ..san import SANConfig

    n_masks = len({"complete", "causal", "sliding_window", "causal_sliding_window", *extra_masks})
    runs = n_masks * n_seeds  # the main run: every mask on every seed, batched
    no_center = SANConfig(d=hypothesis_tokens, n_layers=hypothesis_layers)

    # res: about 8 linear programs per input, each a simplex of ~2 N d rows over ~N d
    # columns, ~12 (N d)^2 operations (sparse; a low share of GEMM)
    def res(N, width):
        return 8 * 12 * (N * width) ** 2

    residual = res_samples * sum(res(N, m) for N in res_sizes for m in res_sizes)
    residual += 4 * res_seeds * res_points * res(hypothesis_tokens, hypothesis_tokens)
    return Work(
        flops=grid_flops({"toy": SANConfig(d=d, n_layers=n_layers)}, n_tokens, runs)
        + grid_flops({"toy": no_center}, hypothesis_tokens, n_seeds + 4 * res_seeds)
        + residual,
        # the larger of: one layer of the main run (X, Q, K, V, output; scores and weights),
        # and the runs that keep every layer's X (no center; the residual's four masks)
        peak_bytes=8
        * max(
            runs * n_tokens * (5 * d + 2 * n_tokens),
            (hypothesis_layers + 1) * max(n_seeds, 4 * res_seeds) * hypothesis_tokens**2,
        ),
    )


@formula("mask-design")
def mask_design(
    n_tokens,
    d,
    n_layers,
    n_seeds,
    graph_tokens,
    probe_windows,
) -> Work:
    """Every deployed pattern and probe on every seed, batched, the two patterns without a
    center again for their components, and the graphs at every size."""
    from ..mask_design import CATALOGUE
    from ..san import SANConfig

    # the deployed patterns, the probes that are not among them, and the window of Swin's
    # radius
    deployed = [(p.mask, p.options) for p in CATALOGUE.values()]
    probes = {
        (mask, w)
        for w in probe_windows
        for mask, count in (("sink_window", "n_sink"), ("longformer", "n_global"))
        if (mask, {"window": w, count: 1}) not in deployed
    }
    runs = n_seeds * (len(deployed) + len(probes) + 1)
    config = {"toy": SANConfig(d=d, n_layers=n_layers)}
    return Work(
        # every pattern on every seed, batched, and again the two patterns without a center
        # (Swin unshifted, dilated Longformer) for their components, and Swin unshifted with
        # other inputs; the graphs' breadth-first searches (~ N x 16 edges per pattern and N)
        # and, for the dense masks, two boolean products (2 N^3 each) are small beside them
        flops=grid_flops(config, n_tokens, runs + 3 * n_seeds)
        + sum(16 * (len(deployed) + len(probes)) * N * N + 2 * 2 * 2 * N**3 for N in graph_tokens),
        # one layer of the batched run: X, Q, K, V, output, scores and weights, in float64
        peak_bytes=8 * runs * n_tokens * (5 * d + 2 * n_tokens),
    )


@formula("recurrent-memory")
def recurrent_memory(d, n_seeds, segment_tokens, memory_tokens, n_segments, n_layers) -> Work:
    """The Recurrent Memory Transformer's two versions, segment by segment on every seed, with
    their unrolled graphs."""
    from ..san import SANConfig

    config = {"rmt": SANConfig(d=d, n_layers=n_layers)}
    # one step of the decoder (memory, segment, memory) and of the encoder (memory, segment)
    steps = (segment_tokens + 2 * memory_tokens, segment_tokens + memory_tokens)
    return Work(
        # each version's steps (segment and memory tokens) on every seed, and its unrolled
        # graph, one sparse product per layer of a reach matrix at most T x T
        flops=sum(
            grid_flops(config, n, n_seeds * n_segments)
            + n_segments * n_layers * n * (memory_tokens + n_segments * n)
            for n in steps
        ),
        # every segment's outputs of one version, and one step's scores and weights
        peak_bytes=8 * n_seeds * (n_segments * segment_tokens * d + 2 * max(steps) ** 2),
    )


@formula("layernorm-orthogonal")
def layernorm_orthogonal(n_tokens, d, n_layers, n_seeds) -> Work:
    """One batched post-LN run: seeds x two token sets x four masks."""
    from ..san import SANConfig

    runs = n_seeds * 2 * 4  # seeds x token sets x masks, batched
    return Work(
        # projections and scores of the one batched run; its matrices are tiny, so the time
        # goes to per-layer Python, LayerNorm and metrics, and its share of GEMM is low
        flops=grid_flops({"ln": SANConfig(d=d, n_layers=n_layers)}, n_tokens, runs),
        # one layer: X, Q, K, V and output, scores and weights, in float64
        peak_bytes=8 * runs * n_tokens * (5 * d + 2 * n_tokens),
    )


@formula("counterexample")
def counterexample(ws, grid_deg, n_steps, torus_deg, n_rotations) -> Work:
    """The two-token system on the grid of token 2's angles for every w, with and without
    LayerNorm, then on the torus of angle pairs, and the rotated construction beside the
    original for every Z."""
    grid = round(360 / grid_deg)  # token 2's initial angles
    torus = round(360 / torus_deg) ** 2  # (token 1, token 2) angle pairs
    # 2-token, 2-D states: about 30 FLOP per state and layer (cumulative mean, X W_V, scale LN)
    states = (
        2 * 40 * len(ws) * grid  # 40 layers with and without LN, kept
        + n_steps * (len(ws) * grid + grid + 7)  # long runs: every w, token 1 at 17.2°, alone
        + n_steps * torus  # the torus of angle pairs
        # rotated: both systems for every Z, the grid of every w and token 1 alone
        + 2 * n_steps * n_rotations * (len(ws) * grid + 7)
    )
    return Work(
        # elementwise work on tiny matrices, one Python step per layer: a low share of GEMM
        flops=30 * states,
        # the torus batch (2 x 2 states) with a few temporaries, or the two 40-layer paths
        peak_bytes=8 * 4 * max(4 * torus, 2 * 41 * len(ws) * grid),
    )


@formula("equilibria")
def equilibria(sizes, ws, rank_n, probe_n, probe_steps, mc_starts, mc_steps) -> Work:
    """The equilibria's linearisations, the stability probe and the Monte Carlo of random
    two-token inputs."""
    n_side = 2 * -(-round(mc_starts**0.5) // 2)  # about the grid of angle pairs
    # one LN layer on an N x N state: cumulative mean, X W_V (2 N^3), scale LN: ~ 2 N^3 + 8 N^2
    layer = {N: 2 * N**3 + 8 * N**2 for N in {*sizes, probe_n, rank_n, 2}}
    # the probe: 2 (N - 1) N directions per sign pattern, followed probe_steps layers
    modes = 2 * probe_n * (probe_n - 1)
    probe = 2 ** (probe_n - 1) * modes * probe_steps * layer[probe_n]
    # the Monte Carlo (N = d = 2): plain and normalised W_V, the grid, 100 kept paths
    monte_carlo = mc_steps * (2 * mc_starts + n_side**2 + 100) * layer[2]
    # every equilibrium's linearisation: eig of the N (N - 1) tangent Jacobian, ~ 25 n^3
    eig = sum(2 ** (N - 1) * len(ws) * 25 * (N * (N - 1)) ** 3 for N in sizes)
    return Work(
        # small matrices, one Python step per layer: a share of GEMM far below 0.01
        flops=probe + monte_carlo + eig,
        # the larger kept path: the probe's perturbations, or the 100 Monte Carlo starts next
        # to a batch of 2 x 2 states and its temporaries
        peak_bytes=8
        * max(
            (probe_steps + 1) * 2 ** (probe_n - 1) * modes * probe_n**2,
            (mc_steps + 1) * 100 * 4 + 4 * 4 * max(mc_starts, n_side**2),
        ),
    )


@formula("temperature")
def temperature(
    toy_n, toy_layers, toy_seeds, n_tokens, d, n_heads, n_layers, n_samples, d_qk_values,
    batch_size,
) -> Work:
    """The toy of Theorem 1 (every network seed on every input) and the BERT-size stack,
    each under the 4 masks at every temperature."""
    from ..san import SANConfig

    runs = 4 * len(d_qk_values)  # masks x temperatures
    chunk = min(batch_size or n_samples, n_samples)
    toy = {"toy": SANConfig(d=toy_n, n_layers=toy_layers)}
    bert = {"san": SANConfig.bert(n_layers=n_layers, d=d, n_heads=n_heads)}
    return Work(
        flops=grid_flops(toy, toy_n, runs * toy_seeds**2)
        + grid_flops(bert, n_tokens, runs * n_samples),
        # one chunk's states: X, the fused Q/K/V (3d) and the output, in float64
        peak_bytes=8 * runs * chunk * n_tokens * 6 * d,
    )


@formula("variants")
def variants(
    n_tokens, d, n_heads, n_layers, n_samples, deep_layers, deep_d, deep_heads, deep_samples,
    deep_weight_seeds, probe_samples, probe_d, probe_heads, batch_size,
) -> Work:
    """The five variants x 4 masks over 12 layers and over the deep stack (first network),
    +skip and +LN through the further deep networks, the +LN probe of the complete mask,
    +skip+LN and full through the further 12-layer networks, and the independent rows."""
    from ..san import bert_variants

    deep = bert_variants(deep_layers, deep_d, deep_heads)
    more = deep_weight_seeds - 1  # networks beyond the first
    flops = (
        grid_flops(bert_variants(n_layers, d, n_heads), n_tokens, 4 * n_samples)  # 5 x 4 masks
        + grid_flops(deep, n_tokens, 4 * deep_samples)  # the deep stack, first network
        # +skip and +LN through the other deep networks
        + grid_flops({v: deep[v] for v in ("skip", "ln")}, n_tokens, 4 * deep_samples * more)
        # the +LN probe, complete mask: centred and scale-only LN at 3 temperatures, normal
        # init, no biases, and the narrow stack
        + grid_flops(bert_variants(n_layers, d, n_heads, ["ln"]), n_tokens, 8 * probe_samples)
        + grid_flops(bert_variants(n_layers, probe_d, probe_heads, ["ln"]), n_tokens,
                     probe_samples)
        # +skip+LN and full at the 12-layer size through the other networks
        + grid_flops(bert_variants(n_layers, d, n_heads, ["skip_ln", "full"]), n_tokens,
                     4 * probe_samples * more)
        # +LN, +skip+LN and full on independent rows, 4 masks
        + grid_flops(bert_variants(n_layers, d, n_heads, ["ln", "skip_ln", "full"]), n_tokens,
                     4 * probe_samples)
    )
    chunk = min(batch_size or n_samples, n_samples)
    deep_chunk = min(batch_size or deep_samples, deep_samples)
    # one chunk x 4 masks: the five variants' states (they share weights and run together)
    # and one layer's temporaries (fused Q/K/V, output, the FFN's 4d hidden twice), float64
    states = max(chunk * (5 * d + 4 * d + 8 * d), deep_chunk * (5 + 4 + 8) * deep_d)
    return Work(flops=flops, peak_bytes=8 * 4 * n_tokens * states)


@formula("orthogonal-values")
def orthogonal_values(
    n_tokens, d, n_heads, n_layers, n_samples, deep_layers, deep_d, deep_heads, deep_samples,
    orthogonal_networks, batch_size,
) -> Work:
    """The +LN stack with uniform and with orthogonal W_V and W_O: under 4 masks through the
    first network and under the 2 windows through the others, at both depths; the QR of both
    matrices in every layer and network, and the orthogonality defects of the first network's
    value maps (12 layers uniform, 2 orthogonal)."""
    from ..cost import dense_flops
    from ..san import bert_variants

    ln, deep = (bert_variants(L, w, h, ["ln"]) for L, w, h in
                ((n_layers, d, n_heads), (deep_layers, deep_d, deep_heads)))
    more = orthogonal_networks - 1  # networks beyond the first
    pairs = 2 * (4 + 2 * more)  # both value maps x (4 masks, then 2 windows per network)
    flops = grid_flops(ln, n_tokens, pairs * n_samples)
    flops += grid_flops(deep, n_tokens, pairs * deep_samples)
    flops += 2 * (dense_flops("qr", d) * (n_layers * (1 + more) + 2)
                  + dense_flops("qr", deep_d) * deep_layers * (1 + more))
    flops += (n_layers + 2) * 3 * 2 * d**3  # W_V W_O and two Gram matrices a layer
    # one chunk x 4 masks x both value maps, and one layer's temporaries (fused Q/K/V and
    # the output), float64
    chunk = min(batch_size or n_samples, n_samples)
    deep_chunk = min(batch_size or deep_samples, deep_samples)
    states = max(chunk * 2 * 5 * d, deep_chunk * 2 * 5 * deep_d)
    return Work(flops=flops, peak_bytes=8 * 4 * n_tokens * states)


@formula("pretrained")
def pretrained(
    checkpoint, n_samples, n_tokens, d_qk_values, deep_layers, deep_samples, batch_size
) -> Work:
    """The five variants, pretrained and at random init, on every window x mask; the SAN at
    every temperature, pretrained and at init; the value-only runs (one mask); and the
    pretrained SAN cycled deep_layers deep on deep_samples windows x masks."""
    from ..san import VARIANTS, SANConfig

    # the packaged MiniLM (6 layers, d = 384, 12 heads, FFN 1536), or a checkpoint, taken to
    # be bert-base (12 layers, d = 768, 12 heads, FFN 3072): no weights are read here
    L, d, h, f = (6, 384, 12, 1536) if checkpoint is None else (12, 768, 12, 3072)

    def model(variant, depth=L):
        return {variant: SANConfig.bert(variant, depth, d=d, n_heads=h, d_ff=f)}

    temps = len(d_qk_values)
    flops = (
        sum(2 * grid_flops(model(v), n_tokens, 4 * n_samples) for v in VARIANTS)
        + grid_flops(model("attention"), n_tokens, 2 * 4 * temps * n_samples + 2 * n_samples)
        + grid_flops(model("attention", deep_layers), n_tokens, 4 * deep_samples)
    )
    # one batch of windows x masks (x temperatures): the SAN runs' states and one layer's
    # temporaries (6 d), or the init sweep's five variants (5 d) with the FFN's (2 x 4 d)
    chunk = min(batch_size or n_samples, n_samples)
    states = max(temps * 6 * d, 5 * d + 4 * d + 2 * f)
    return Work(flops=flops, peak_bytes=8 * 4 * chunk * n_tokens * states)


@formula("token-geometry")
def token_geometry(checkpoint, model_dirs, n_samples, n_tokens, batch_size) -> Work:
    """Every model's full stack on the windows, with the geometry metrics at every layer."""
    from ..san import SANConfig

    # the packaged MiniLM (6 layers, d = 384, 12 heads, FFN 1536) or a checkpoint, and each
    # folder of model_dirs, taken to be bert-base (12, 768, 12, 3072): no weights are read here
    sizes = [(6, 384, 12, 1536) if checkpoint is None else (12, 768, 12, 3072)]
    sizes += [(12, 768, 12, 3072)] * len(model_dirs)
    chunk = min(batch_size or n_samples, n_samples)
    flops, peak = 0.0, 0.0
    for L, d, h, f in sizes:
        a, b = max(n_tokens, d), min(n_tokens, d)
        # per window and layer (from 0): svdvals of X (~ 4 a b^2 - 4/3 b^3), the Gram matrix
        # and its eigvalsh (2 a b^2 + 4/3 b^3), the cosines (2 N^2 d)
        per_layer = 6 * a * b**2 + 2 * n_tokens**2 * d
        full = {"full": SANConfig.bert("full", L, d=d, n_heads=h, d_ff=f)}
        flops += grid_flops(full, n_tokens, n_samples) + n_samples * (L + 1) * per_layer
        # a batch of windows: X, fused Q/K/V, output, the FFN's hidden twice, the scores
        peak = max(peak, 8 * chunk * n_tokens * (6 * d + 2 * f + 2 * h * n_tokens))
    return Work(flops=flops, peak_bytes=peak)


def _san_flops(d, depth, n, runs):
    """Projections and scores of `runs` stacks of n tokens of width d, `depth` layers."""
    from ..san import SANConfig

    return grid_flops({"san": SANConfig(d=d, n_layers=depth)}, n, runs)


def _qr_flops(d, depth, n_seeds):
    """Orthogonal W_V: a QR with its Q (8/3 d^3) per layer and seed."""
    return n_seeds * depth * 8 / 3 * d**3


@formula("open-questions")
def open_questions(
    n_tokens, widths, n_seeds, width_layers, norm_layers, linear_layers, softmax_layers
) -> Work:
    """The width runs (three value laws), the norm runs under 8 masks, the softmax and
    linear runs; small matrices, one Python step per layer, thousands of layers: a low share
    of GEMM."""
    N = n_tokens
    flops = sum(  # random W_V at each width (the QR dominates when d >> N), mean |cos|
        3 * _san_flops(d, width_layers, N, 2 * n_seeds)
        + _qr_flops(d, width_layers, n_seeds)
        + 3 * 2 * n_seeds * (width_layers + 1) * 2 * N**2 * d
        for d in widths
    )
    flops += 2 * _san_flops(N, norm_layers, N, 8 * n_seeds) + _qr_flops(N, norm_layers, n_seeds)
    flops += _san_flops(N, norm_layers // 4, N, 8 * n_seeds)  # 8 masks, with LN
    flops += _qr_flops(N, norm_layers // 4, n_seeds)
    flops += 4 * _san_flops(N, softmax_layers, N, n_seeds)
    flops += 3 * _san_flops(N, softmax_layers, N, 1)
    flops += _san_flops(N, linear_layers, N, 3 * n_seeds)  # the linear case, 3 masks
    # 1 - cos of every pair under LN (differences, N^2 d), width runs and the 8-mask run
    flops += 3 * sum(3 * 2 * n_seeds * (width_layers + 1) * N**2 * d for d in widths)
    flops += 3 * 8 * n_seeds * (norm_layers // 4 + 1) * N**3
    # the widest run: every seed's weights and a QR's temporaries beside the states
    peak = 8 * n_seeds * (5 * max(widths) ** 2 + 10 * N * max(widths))
    return Work(flops=flops, peak_bytes=peak)


@formula("layernorm-discontinuity")
def layernorm_discontinuity(n_seeds, path_points, path_layers, rms_layers, grid_deg) -> Work:
    """The 2-token paths and circles of the counterexample (about 30 FLOP a layer for a 2-D
    state) and RMSNorm in chapter 04's setting (N = 8, d = 16, four masks, two token sets)."""
    circle = round(360 / grid_deg)
    # the path with and without LN, the RMSNorm counterexample on the circle (simulated and
    # iterated, 3 gains) and scale-only LN
    flops = 30 * (2 * path_points * max(path_layers) + 7 * circle * rms_layers)
    flops += 3 * _san_flops(2, rms_layers, 2, circle)
    flops += 3 * _san_flops(16, rms_layers, 8, 8 * n_seeds)
    flops += 3 * _qr_flops(16, rms_layers, n_seeds)
    # the two kept paths of the value-matrix sweep
    return Work(flops=flops, peak_bytes=8 * 2 * (max(path_layers) + 1) * path_points * 4)
