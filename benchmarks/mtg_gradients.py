"""Wall time of the exact gradient norms ||dX_L/dW_1||_F^2 at the Mind-the-Gap README's scale.

Grid (the default): Markov attention A and A-perp (the fix), each without and with
skip connections, T = d in {20, 40, 80, 150}, every depth L = 2..10, 5 seeds, float64:
4 configurations x 4 T x 9 depths x 5 seeds = 720 exact norms. One network of depth
10 per (configuration, T) serves every smaller depth (its first L layers), and the
closed forms of collapse.gradients return all depths in one pass (the skip form sums
two 2^(L-1) x 2^(L-1) Gram matrices, 512 x 512 at L = 10). The target is <= 10 minutes
on this 2-core machine; it takes well under one.

For comparison: the official script (gradients_norms.py, README setting T in
{20, ..., 150}, max depth 10, 5 simulations, 12 configurations) materialises the full
(T d) x (T d) Jacobian with torch.autograd.functional.jacobian for every depth, which
is estimated at 10+ hours, and it plots a proxy (||J|| ||J A X||, J evaluated at the
input), not this norm.

--autograd T additionally times the exact autograd norm (chunked vmap of vjps, needed
for key-query A(X) and LayerNorm) for key-query N(0,1) attention at L = 2 and that T,
5 seeds, and prints its FLOP rate as a fraction of a plain matmul's in this process.

    python benchmarks/mtg_gradients.py [--T 20 40 80 150] [--depth 10] [--seeds 5]
        [--threads 1] [--autograd 40]
"""

from __future__ import annotations

import argparse
import time

import torch

from collapse import gap, gradients, runtime


def matmul_rate(n: int = 512) -> float:
    """GFLOP/s of a plain float64 n x n matmul in this process (best of 5)."""
    a, b = torch.randn(n, n, dtype=torch.float64), torch.randn(n, n, dtype=torch.float64)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(5))
    return 2 * n**3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, nargs="+", default=[20, 40, 80, 150])
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1 is fastest on a shared 2-core machine)",
    )
    parser.add_argument(
        "--autograd", type=int, default=0, help="also time key-query autograd at L = 2 and this T"
    )
    args = parser.parse_args()
    runtime.use_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
        f"float64 matmul {matmul_rate():.1f} GFLOP/s"
    )
    print(
        "grid: Markov A, A-perp, A+skip, A-perp+skip; "
        f"T = d in {args.T}; L = 2..{args.depth}; {args.seeds} seeds"
    )
    seeds = range(args.seeds)
    total = time.perf_counter()
    for T in args.T:
        start, levels = time.perf_counter(), []
        for skip in (False, True):
            for fix in (False, True):
                net = gradients.draw(
                    gap.GapConfig(T=T, d=T, n_layers=args.depth, fix=fix, skip=skip), seeds
                )
                norms = gradients.exact_norms(net, range(2, args.depth + 1))
                assert torch.isfinite(norms).all() and (norms > 0).all()
                levels.append(norms.log().mean(1)[-1].item())
        print(
            f"T = {T:4d}: {time.perf_counter() - start:6.2f} s   "
            f"mean log||J||^2 at L = {args.depth}: " + ", ".join(f"{v:.1f}" for v in levels)
        )
    wall = time.perf_counter() - total
    print(
        f"total wall time: {wall:.1f} s "
        f"({len(args.T) * 4 * (args.depth - 1) * args.seeds} exact norms; target <= 600 s)"
    )
    if args.autograd:
        T = args.autograd
        net = gradients.draw(gap.GapConfig(T=T, d=T, n_layers=2, attention="normal"), seeds)
        gradients.autograd_norm(
            gradients.draw(gap.GapConfig(T=8, d=8, n_layers=2, attention="normal"), 0)
        )  # warm-up
        seconds = _timed(lambda: gradients.autograd_norm(net, 2))
        rate = gradients.autograd_flops(T, T, 2, args.seeds, keyquery=True) / seconds / 1e9
        print(
            f"autograd, key-query N(0,1), L = 2, T = {T}, {args.seeds} seeds: {seconds:.2f} s, "
            f"~{rate:.1f} GFLOP/s = {rate / matmul_rate():.2f} of a plain matmul; "
            "cost grows like T^5"
        )


if __name__ == "__main__":
    main()
