"""Useful FLOP rate of a BERT-sized attention-only SAN, as a fraction of a plain matmul's.

Simulates 12 layers of 12-head, d=768 self-attention (Q/K/V/O with biases, fresh
weights per layer, mu tracked per layer) on a batch of 32 sequences of 128 tokens,
in float32 and float64, and divides its useful FLOP rate by the rate of a plain
batched matmul of the same shapes ((32, 128, 768) @ (768, 768)) timed in the same
process. Machines here are noisy; ratios measured side by side are not.

    python benchmarks/san_throughput.py [--repeats 3] [--batch 32] [--layers 12]
"""

from __future__ import annotations

import argparse
import time

import torch

from collapse import masks, san


def useful_flops(batch: int, n: int, d: int, layers: int) -> float:
    """Multiply-adds x 2 of Q/K/V/O projections, scores and A V; softmax and metrics not counted."""
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


def measure(dtype, args) -> tuple[float, float, float]:
    """(SAN rate, matmul rate, SAN rate with pre-drawn weights), in GFLOP/s."""
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
    return flops / san_s / 1e9, 2 * b * n * d * d / matmul_s / 1e9, flops / predrawn_s / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch {args.batch}, N={args.tokens}, d=768, 12 heads, {args.layers} layers")
    for dtype in (torch.float32, torch.float64):
        san_rate, matmul_rate, predrawn_rate = measure(dtype, args)
        name = str(dtype).removeprefix("torch.")
        print(
            f"{name}: SAN {san_rate:6.1f} GFLOP/s, matmul {matmul_rate:6.1f} GFLOP/s, "
            f"ratio {san_rate / matmul_rate:.2f} (weights pre-drawn: {predrawn_rate / matmul_rate:.2f})"
        )


if __name__ == "__main__":
    main()
