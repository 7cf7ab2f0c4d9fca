"""Useful FLOP rate of a BERT-sized attention-only SAN, as a fraction of a plain matmul's.

Simulates 12 layers of 12-head, d=768 self-attention (Q/K/V/O with biases, fresh
weights per layer, mu tracked per layer) on a batch of 32 sequences of 128 tokens,
in float32 and float64, and divides its useful FLOP rate by the rate of a plain
batched matmul of the same shapes ((32, 128, 768) @ (768, 768)) timed in the same
process. Machines here are noisy; ratios measured side by side are not.

When `transformers` is installed it also times a reference: the same attention-only
stack built from transformers' BertSelfAttention modules (with its "eager" and its
"sdpa" attention implementations) plus each layer's output projection, layer by layer, with
the same weights, mask and per-layer mu, and prints how many times faster the SAN is (the
reference's modules are built before timing; the SAN draws its weights inside).
Both must agree on mu to 1e-5 (float32) / 1e-10 (float64) of its first-layer value, or
it stops (relative to mu itself would not do: once tokens collapse, mu is rounding noise).

    python benchmarks/san_throughput.py [--repeats 3] [--batch 32] [--layers 12]
"""

from __future__ import annotations

import argparse
import time

import torch

from collapse import masks, metrics, san


def useful_flops(batch: int, n: int, d: int, layers: int) -> float:
    """Multiply-adds x 2 of Q/K/V/O projections, scores and A V; softmax and
    metrics not counted.
    """
    projections = 4 * 2 * batch * n * d * d
    attention = 2 * 2 * batch * n * n * d
    return layers * (projections + attention)


def best_time(fn, repeats: int) -> float:
    fn()  # warm-up: allocator, thread pool, kernel selection
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def transformers_stack(config: san.SANConfig, weights, dtype, kind: str):
    """transformers' BertSelfAttention + output projection per layer, holding our weights (ours act
    on the right: X @ W).
    """
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertSelfAttention

    bert = BertConfig(
        hidden_size=config.d, num_attention_heads=config.n_heads, attention_probs_dropout_prob=0.0
    )
    bert._attn_implementation = kind
    layers = []
    for w in weights:
        attention, output = BertSelfAttention(bert), torch.nn.Linear(config.d, config.d)
        for linear, W, b in (
            (attention.query, w.W_Q, w.b_Q),
            (attention.key, w.W_K, w.b_K),
            (attention.value, w.W_V, w.b_V),
            (output, w.W_O, w.b_O),
        ):
            linear.weight.data, linear.bias.data = W.T.contiguous(), b.clone()
        layers.append((attention.to(dtype).eval(), output.to(dtype).eval()))
    return layers


@torch.inference_mode()
def run_transformers(X, layers, mask):
    """The reference stack: mu in float64 after every layer, as san.simulate keeps it."""
    bias = torch.zeros(mask.shape, dtype=X.dtype).masked_fill_(~mask, -torch.inf)[
        None, None
    ]  # additive, broadcast over batch and heads
    history = [metrics.mu(X)]
    for attention, output in layers:
        X = output(attention(X, attention_mask=bias)[0])
        history.append(metrics.mu(X))
    return torch.stack(history)


def measure(dtype, args) -> tuple[float, float, float, dict[str, float]]:
    """(SAN rate, matmul rate, SAN rate with pre-drawn weights, {attention kind: transformers
    reference rate}), in GFLOP/s.
    """
    b, n, d, L = args.batch, args.tokens, 768, args.layers
    g = torch.Generator().manual_seed(0)
    X = torch.randn(b, n, d, generator=g, dtype=dtype)
    W = torch.randn(d, d, generator=g, dtype=dtype)
    matmul_s = best_time(lambda: X @ W, args.repeats * 5)
    config = san.SANConfig.bert(variant="attention", n_layers=L)
    mask = masks.make("causal", n)
    run = lambda weights=None: san.simulate(X, config, mask=mask, weights=weights)  # noqa: E731
    san_s = best_time(run, args.repeats)
    drawn = list(san.init_layers(config, 0, dtype=dtype))
    predrawn_s = best_time(lambda: run(drawn), args.repeats)
    flops = useful_flops(b, n, d, L)
    references = {}
    for kind in ("eager", "sdpa"):
        try:
            layers = transformers_stack(config, drawn, dtype, kind)
        except ImportError:
            break
        ours, theirs = run(drawn)["mu"], run_transformers(X, layers, mask)
        worst = float((ours - theirs).abs().max() / ours[0].abs().max())
        if worst > (1e-5 if dtype == torch.float32 else 1e-10):
            raise SystemExit(
                f"{dtype}, {kind}: the transformers reference disagrees with the SAN "
                f"(mu differs by {worst:.1e} of its first value)"
            )
        references[kind] = (
            flops
            / best_time(lambda layers=layers: run_transformers(X, layers, mask), args.repeats)
            / 1e9
        )
    return (
        flops / san_s / 1e9,
        2 * b * n * d * d / matmul_s / 1e9,
        flops / predrawn_s / 1e9,
        references,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"batch {args.batch}, N={args.tokens}, d=768, 12 heads, {args.layers} layers"
    )
    for dtype in (torch.float32, torch.float64):
        san_rate, matmul_rate, predrawn_rate, references = measure(dtype, args)
        name = str(dtype).removeprefix("torch.")
        print(
            f"{name}: SAN {san_rate:6.1f} GFLOP/s, matmul {matmul_rate:6.1f} GFLOP/s, "
            f"ratio {san_rate / matmul_rate:.2f} "
            f"(weights pre-drawn: {predrawn_rate / matmul_rate:.2f})"
        )
        if not references:
            print(f"{name}: transformers not installed, no reference")
        for kind, reference in references.items():
            print(
                f"{name}: transformers BertSelfAttention ({kind}) {reference:6.1f} GFLOP/s, "
                f"ratio {reference / matmul_rate:.2f}; "
                f"SAN speed-up {san_rate / reference:.2f}x "
                f"(weights pre-drawn: {predrawn_rate / reference:.2f}x)"
            )


if __name__ == "__main__":
    main()
