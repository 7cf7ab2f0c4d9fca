"""The official Mind-the-Gap stable-rank sweep (its README command), batched and in float64.

The README of the official code runs

    python stable_ranks.py --list_gammas 1 0.5 0.2 --n_simulations 5 --n_layers 10
        --list_n 20 40 60 80 100 150

over the configurations of its configs.py. We run the nine of rebuttal Fig. VII: random
Markov A and A⊥ = A - 11^T/T, each with nothing, +LN, +skip and +skip+LN, plus Identity A
(configs.py also holds "upscaled skip" variants and key-query A(X) variants, which the
sweep's figures do not use and we do not run). d = int(T / gamma), W_l ~ N(0, 1),
isometric X_0, one residual (the official block's doubled residual only rescales X,
which no stable rank sees). The official script takes ~2.5 min on one core and records
~8% NaN/inf, because sigma^4 overflows float32; this one should take <= 30 s here and
exits 1 if any value is not finite. It prints the wall time, the number of runs (variant x
gamma x T x seed, each with 10 layers) and the number of non-finite values, and, as a
check of the science, sr(XX^T) at T = 150, gamma = 1 for each variant at depths 1, 2, 10.
With --official-float32 it also reruns the grid in float32 with the official code's metric
(svdvals of XX^T, squared, in float32) and counts the values that overflow, for comparison
(the exit status does not depend on that count).

One thread by default: on a machine whose cores are busy, two OpenMP threads spin-wait on
each other in the many small batched eigen-decompositions (we measured 12 s with one thread
and 165 s with two under load); --threads 0 keeps torch's default.

    python benchmarks/mtg_stable_rank.py [--seeds 5] [--layers 10] [--threads 1]
        [--official-float32]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from collapse import gap, runtime

GAMMAS = (1.0, 0.5, 0.2)
T_VALUES = (20, 40, 60, 80, 100, 150)


def run(
    n_seeds: int, n_layers: int, metrics=("stable_rank", "gram_stable_rank"), dtype=torch.float64
):
    """The README grid: (frame, seconds)."""
    variants = gap.fig7_variants("markov")
    start = time.perf_counter()
    frame = gap.width_sweep(
        variants,
        T_VALUES,
        GAMMAS,
        n_layers=n_layers,
        seeds=range(n_seeds),
        metrics=metrics,
        dtype=dtype,
    )
    return frame, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (0: torch's default)"
    )
    parser.add_argument(
        "--official-float32",
        action="store_true",
        help="also count the official metric's float32 overflows",
    )
    args = parser.parse_args()
    if args.threads:
        runtime.use_threads(args.threads)
    frame, seconds = run(args.seeds, args.layers)
    values = frame[["stable_rank", "gram_stable_rank"]].to_numpy()
    bad = int((~np.isfinite(values)).sum())
    runs = frame.groupby(["variant", "gamma", "T", "seed"]).ngroups
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads: "
        f"{len(frame['variant'].unique())} variants x "
        f"{len(GAMMAS)} gammas x {len(T_VALUES)} T x {args.seeds} seeds = "
        f"{runs} runs of {args.layers} layers"
    )
    print(f"wall time {seconds:.1f} s; {values.size} stable-rank values, {bad} non-finite")
    last = frame[(frame["T"] == 150) & (frame["gamma"] == 1.0)]
    table = last.groupby(["variant", "layer"])["gram_stable_rank"].mean().unstack("layer")
    depths = [t for t in (1, 2, args.layers) if t in table.columns]
    print("sr(XX^T), mean over seeds, T = d = 150, at depths", depths)
    print(table[depths].round(2).to_string())
    if args.official_float32:
        single, seconds = run(
            args.seeds, args.layers, ("official_gram_stable_rank",), torch.float32
        )
        layers = single[
            single["layer"] > 0
        ]  # the official script records the output of every block, not the input
        lost = ~np.isfinite(layers["official_gram_stable_rank"].to_numpy())
        print(
            f"float32 with the official metric: {lost.sum()} of {lost.size} values non-finite "
            f"({lost.mean():.1%}), {seconds:.1f} s"
        )
        print(
            layers.assign(lost=lost)
            .groupby("variant")["lost"]
            .mean()
            .map("{:.0%}".format)
            .to_string()
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
