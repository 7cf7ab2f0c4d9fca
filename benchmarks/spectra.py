"""Top-k singular values of random Markov attention: thick-restart Lanczos against a reference.

For each T, draws A = markov.random_markov(T) (seed 0; the draw is not timed and its
time is printed apart), times markov.lanczos_singular_values(A, k) (float32 Krylov steps
and a float64 refinement by default, --precision double for float64 throughout) and
checks its values against a reference: the full SVD (torch.linalg.svdvals) for
T <= --full-svd-max, else scipy's ARPACK (svds, 64 Lanczos vectors, tol=0, float64),
itself checked against a second ARPACK run (32 vectors, another start vector). Prints
time, steps, speed-up, the largest |difference| relative to sigma_1 (targets: <= 1e-9,
>= 18x the full SVD at T = 4096 and >= 10x ARPACK at T = 16384) and the bandwidth floor:
the bytes of A the products read (info["bytes"]) over the read bandwidth measured in the
same process (the best of five A.sum() over the float32 copy of A), so time / floor says
how close to the memory limit the method runs. Lanczos and ARPACK run in turn for
--repeats rounds and each one's best run counts (the full SVD, minutes long, runs once);
every run's time is printed.

    python benchmarks/spectra.py [--T 4096 16384] [--k 2] [--full-svd-max 4096] [--repeats 2]
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


def arpack(A: torch.Tensor, k: int, ncv: int, seed: int) -> np.ndarray:
    values = svds(A.numpy(), k=k, ncv=ncv, tol=0, random_state=seed, return_singular_vectors=False)
    return np.sort(values)[::-1]


def best_of_rounds(repeats: int, *fns) -> list[tuple[object, float, list[float]]]:
    """(value, seconds, every run's seconds) of the fastest run of each function, called in turn
    for `repeats` rounds: a busy machine only ever slows a run, every function gets the same
    number of tries, and each round spreads one stretch of load over all of them."""
    runs = [[] for _ in fns]
    for _ in range(repeats):
        for fn, done in zip(fns, runs, strict=True):
            done.append(timed(fn))
    return [
        (*min(done, key=lambda run: run[1]), [seconds for _, seconds in done]) for done in runs
    ]


def listed(seconds: list[float]) -> str:
    return ", ".join(f"{s:.2f}" for s in seconds)


def read_bandwidth(A: torch.Tensor) -> float:
    """Bytes per second of the fastest of five full reads (sums) of a float32 copy of A."""
    copy = A.to(torch.float32)
    seconds = min(timed(copy.sum)[1] for _ in range(5))
    return copy.nbytes / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--block", type=int, default=1, help="Lanczos block size")
    parser.add_argument("--precision", choices=["mixed", "double"], default="mixed")
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs of Lanczos and of ARPACK; the best counts"
    )
    parser.add_argument(
        "--full-svd-max",
        type=int,
        default=4096,
        help="largest T checked against a full SVD (above: ARPACK)",
    )
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; k = {args.k}")
    for size in args.T:
        A, draw = timed(
            lambda size=size: markov.random_markov(
                size, generator=torch.Generator().manual_seed(0)
            )
        )
        bandwidth = read_bandwidth(A)

        def lanczos(A=A):
            return markov.lanczos_singular_values(
                A, args.k, block=args.block, precision=args.precision
            )

        if size <= args.full_svd_max:
            [((values, info), seconds, runs)] = best_of_rounds(args.repeats, lanczos)
            truth, ref_seconds = timed(lambda A=A: torch.linalg.svdvals(A)[: args.k].numpy())
            ref_runs, ref_name, ref_check = [ref_seconds], "full SVD", ""
        else:
            ((values, info), seconds, runs), (truth, ref_seconds, ref_runs) = best_of_rounds(
                args.repeats, lanczos, lambda A=A: arpack(A, args.k, 64, 0)
            )
            second = arpack(A, args.k, 32, 1)
            ref_name = "ARPACK svds"
            ref_check = (
                f"; ARPACK with 32 vectors and another start differs by "
                f"{np.abs(second - truth).max() / truth[0]:.1e}"
            )
        error = float(np.abs(values.numpy() - truth).max() / truth[0])
        floor = info["bytes"] / bandwidth
        print(
            f"T = {size}: Lanczos ({info['precision']}) {seconds:.2f} s (runs {listed(runs)}), "
            f"{info['steps']} steps "
            f"({info['passes']} products with A or A^T, the refinement's included), "
            f"{info['bytes'] / 2**30:.1f} GiB of A read: bandwidth floor {floor:.2f} s "
            f"at {bandwidth / 1e9:.1f} GB/s (A.sum()), time / floor {seconds / floor:.1f}\n"
            f"  {ref_name} {ref_seconds:.2f} s (runs {listed(ref_runs)}), "
            f"speed-up {ref_seconds / seconds:.1f}x; "
            f"max |difference| / sigma_1 = {error:.1e}{ref_check}\n"
            f"  sigma = {', '.join(f'{v:.12f}' for v in values.tolist())}; "
            f"drawing A took {draw:.1f} s (not timed)"
        )
        del A


if __name__ == "__main__":
    main()
