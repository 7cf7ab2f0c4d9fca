"""Top-k singular values of random Markov attention: thick-restart Lanczos against the full SVD.

For each T, draws A = markov.random_markov(T) (seed 0; the draw is not timed and its
time is printed apart), times markov.lanczos_singular_values(A, k) and checks its
values against a reference: the full SVD (torch.linalg.svdvals) for T <= --full-svd-max,
else scipy's ARPACK (svds, 64 Lanczos vectors, tol=0, float64) unless --full-svd-max covers
it too (a full SVD at T = 16384 takes about 15 min on two cores). Prints time, speed-up and
the largest |difference| relative to sigma_1 (target: <= 1e-8; >= 20x faster at T = 4096
and under 10 s at T = 16384).

    python benchmarks/spectra.py [--T 4096 16384] [--k 2] [--full-svd-max 4096]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy.sparse.linalg import svds

from collapse import markov


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def reference(A: torch.Tensor, k: int, full: bool) -> tuple[np.ndarray, float, str]:
    if full:
        values, seconds = timed(lambda: torch.linalg.svdvals(A)[:k].numpy())
        return values, seconds, "full SVD"
    values, seconds = timed(
        lambda: np.sort(
            svds(A.numpy(), k=k, ncv=64, tol=0, random_state=0, return_singular_vectors=False)
        )[::-1]
    )
    return values, seconds, "ARPACK svds"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--block", type=int, default=1, help="Lanczos block size")
    parser.add_argument(
        "--full-svd-max",
        type=int,
        default=4096,
        help="largest T checked against a full SVD (above: ARPACK)",
    )
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; k = {args.k}, float64")
    for size in args.T:
        A, draw = timed(
            lambda size=size: markov.random_markov(
                size, generator=torch.Generator().manual_seed(0)
            )
        )
        (values, info), seconds = timed(
            lambda A=A: markov.lanczos_singular_values(A, args.k, block=args.block)
        )
        truth, ref_seconds, ref_name = reference(A, args.k, size <= args.full_svd_max)
        error = float(np.abs(values.numpy() - truth).max() / truth[0])
        print(
            f"T = {size}: Lanczos {seconds:.2f} s "
            f"({info['steps']} steps, {info['passes']} passes), {ref_name} {ref_seconds:.2f} s, "
            f"speed-up {ref_seconds / seconds:.1f}x; max |difference| / sigma_1 = {error:.1e}; "
            f"sigma = {', '.join(f'{v:.12f}' for v in values.tolist())}; "
            f"drawing A took {draw:.1f} s (not timed)"
        )
        del A


if __name__ == "__main__":
    main()
