"""The official Mind-the-Gap stable-rank sweep (its README command), against the official code.

The README of the official code runs

    python stable_ranks.py --list_gammas 1 0.5 0.2 --n_simulations 5 --n_layers 10
        --list_n 20 40 60 80 100 150

over the configurations of its configs.py. We run the nine of rebuttal Fig. VII: random
Markov A and A⊥ = A - 11^T/T, each with nothing, +LN, +skip and +skip+LN, plus Identity A
(configs.py also holds "upscaled skip" variants and key-query A(X) variants, which the
sweep's figures do not use and we do not run). d = int(T / gamma), W_l ~ N(0, 1),
isometric X_0, one residual (the official block's doubled residual only rescales X,
which no stable rank sees). Ours is `gap.width_sweep(..., fast=True)`: float32 draws shared
by the nine configurations of a seed, float32 arithmetic rescaled every layer, stacks
without skip sharing their X W products (see `gap.simulate_shared`).

It prints our wall and CPU time, the number of runs (variant x gamma x T x seed, each with 10
layers) and of non-finite values, and, as a check of the science, sr(XX^T) at T = 150,
gamma = 1 for each variant at depths 1, 2, 10. Then it checks float32 against float64: the
same draws rerun in float64, every value (both stable ranks, every layer) compared.

--official PATH (a checkout of the official repository) also:
  * times the official code itself: its produce_stable_ranks on the nine configurations and
    the same grid as the README runs it (its own draws, seeded here; its CSV files go to a
    temporary folder), and counts its NaN/inf values (sigma^4 overflows float32). Both
    codes are timed cell by cell, each (gamma, T) cell of ours next to the same cell of
    theirs, so that a shared machine's load weighs on both alike;
  * runs the official model (model.TransformerModel, float32) on our very draws: each
    block's W_V gets W_l^T, each Markov block's logits ours, the input our X_0; its
    output at every layer goes through the official metric (svdvals of XX^T, squared,
    float32: inline in its stable_ranks.py, so gap.official_gram_stable_rank, the same
    formula, computes it). Each finite value is compared one by one with ours (sr(XX^T),
    same variant, gamma, T, seed and layer): the worst relative difference must be <= 2%.
Exit status 1 if ours has a non-finite value, float32 is off float64 by more than 2%, or
the official match fails. Timings use one thread for both by default (torch's, and numpy's
BLAS for the official X_0 QR); the ratio within one run is what counts on a busy machine.
--official-float32 also reruns our default engine in float32 with the official metric and
counts the values that overflow (the exit status does not depend on that count).

    python benchmarks/mtg_stable_rank.py [--seeds 5] [--layers 10] [--threads 1]
        [--official PATH] [--official-float32]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from threadpoolctl import threadpool_limits

from collapse import gap, runtime

GAMMAS = (1.0, 0.5, 0.2)
T_VALUES = (20, 40, 60, 80, 100, 150)
TOLERANCE = 0.02
KEYS = ["variant", "gamma", "T", "seed", "layer"]
# our label -> the official configs.py key of the same configuration
OFFICIAL_NAMES = {
    "A": "A",
    "A+LN": "A + LN",
    "A+skip": "A + skip",
    "A+skip+LN": "A + skip + LN",
    "A⊥": "$A^{\\perp}$",
    "A⊥+LN": "$A^{\\perp}$ + LN",
    "A⊥+skip": "$A^{\\perp}$ + skip",
    "A⊥+skip+LN": "$A^{\\perp}$ + skip + LN",
    "Identity A": "Identity A",
}


def run(
    n_seeds: int,
    n_layers: int,
    metrics=("stable_rank", "gram_stable_rank"),
    dtype=None,
    fast: bool = True,
    T_values=T_VALUES,
    gammas=GAMMAS,
):
    """The README grid (or part of it): (frame, wall seconds, CPU seconds of this process)."""
    start, cpu = time.perf_counter(), time.process_time()
    frame = gap.width_sweep(
        gap.fig7_variants("markov"),
        T_values,
        gammas,
        n_layers=n_layers,
        seeds=range(n_seeds),
        metrics=metrics,
        dtype=dtype,
        fast=fast,
    )
    return frame, time.perf_counter() - start, time.process_time() - cpu


def timed_sweep(n_seeds: int, n_layers: int, official, threads: int):
    """Ours on the README grid, and with `official` the official code on the same grid, timed
    cell by cell: (our frame, our [wall, CPU] s, official [wall, CPU] s, official sr(XX^T)).

    Why cell by cell: each (gamma, T) cell of ours runs right next to the same cell of the
    official code (its produce_stable_ranks on the nine configurations, list_n=[T],
    list_gammas=[gamma]: the same work as the README call, in another loop order), so the
    load of a shared machine weighs on both alike. The official code draws its own matrices
    (torch's and numpy's global generators, seeded 0 here); its CSV files go to a temporary
    folder, from which its values are read back.
    """
    torch.manual_seed(0)
    np.random.seed(0)
    frames, ours, theirs = [], np.zeros(2), np.zeros(2)
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.chdir(tmp),
        blas_threads(threads),
    ):
        for gamma in GAMMAS:
            for T in T_VALUES:
                frame, *seconds = run(n_seeds, n_layers, T_values=[T], gammas=[gamma])
                frames.append(frame)
                ours += seconds
                if official is None:
                    continue
                start, cpu = time.perf_counter(), time.process_time()
                for name in OFFICIAL_NAMES.values():
                    official.stable_ranks.produce_stable_ranks(
                        name,
                        official.configs.configs[name],
                        n_layers,
                        list_n=[T],
                        n_simulations=n_seeds,
                        list_gammas=[gamma],
                    )
                theirs += (time.perf_counter() - start, time.process_time() - cpu)
        csvs = list(Path(tmp).rglob("*.csv"))
        values = pd.concat(pd.read_csv(f) for f in csvs)["stable_rank"] if csvs else pd.Series()
    values = pd.to_numeric(values, errors="coerce").to_numpy()
    return pd.concat(frames, ignore_index=True), ours, theirs, values


def worst_difference(ours: pd.DataFrame, theirs: pd.DataFrame, columns) -> tuple[int, float]:
    """(values compared, worst relative difference) over the rows both frames hold, skipping
    the values `theirs` has non-finite."""
    both = ours.merge(theirs, on=KEYS, suffixes=("", "_ref"))
    ref = both[[f"{c}_ref" for c in columns]].to_numpy()
    rel = np.abs(both[list(columns)].to_numpy() / ref - 1)[np.isfinite(ref)]
    return rel.size, float(rel.max(initial=0.0))


def load_official(path: Path) -> types.SimpleNamespace:
    """The official stable_ranks, configs and model modules, imported from the checkout."""
    path = path.resolve()
    if not (path / "stable_ranks.py").is_file():
        raise SystemExit(f"--official {path}: no stable_ranks.py there")
    with contextlib.suppress(ImportError):
        import omegaconf  # noqa: F401 (utils.py imports it for helpers the sweep does not call)
    sys.modules.setdefault("omegaconf", types.SimpleNamespace(DictConfig=dict))
    sys.path.insert(0, str(path))
    modules = {n: importlib.import_module(n) for n in ("stable_ranks", "configs", "model")}
    for name, module in modules.items():
        if Path(module.__file__).resolve().parent != path:
            raise SystemExit(f"--official: {name} was imported from {module.__file__}")
    missing = set(OFFICIAL_NAMES.values()) - set(modules["configs"].configs)
    if missing:
        raise SystemExit(f"--official: configs.py lacks {sorted(missing)}")
    return types.SimpleNamespace(**modules)


def blas_threads(n: int):
    """numpy's BLAS (the official X_0 QR) on n threads (0: as is)."""
    return threadpool_limits(n) if n else contextlib.nullcontext()


@torch.inference_mode()
def official_on_our_draws(official, n_seeds: int, n_layers: int) -> pd.DataFrame:
    """The official float32 model and metric on `gap.shared_draws`: one row per value."""
    rows = []
    for gamma in GAMMAS:
        for T in T_VALUES:
            d = gap.width_for(T, gamma)
            draws = [gap.shared_draws(T, d, n_layers, seed) for seed in range(n_seeds)]
            for label, name in OFFICIAL_NAMES.items():
                params = official.configs.configs[name]
                model = official.model.TransformerModel(
                    n_layers,
                    T,
                    gamma,
                    heads=params.get("heads"),
                    attention_type=params.get("attention_type"),
                    distribution_A=params.get("distribution_A"),
                    distribution_V=params.get("distribution_V"),
                    LN=params.get("layernorm"),
                    skip_connections=params.get("skip_connections"),
                    sigma_A=params.get("sigma_A"),
                    sigma_V=params.get("sigma_V"),
                    mlp=params.get("mlp"),
                    distribution_Q=params.get("distribution_Q"),
                    distribution_K=params.get("distribution_K"),
                )
                markov = params.get("distribution_A") != "identity"
                for seed, draw in enumerate(draws):
                    for layer, block in enumerate(model.blocks):
                        attention = block.multi_head_attention
                        attention.W_V.weight.copy_(draw["W"][layer].T)  # W_V(x) = x W_V^T
                        if markov:
                            attention.attention.unnormalized_weights.weight.copy_(
                                draw["logits"][layer]
                            )
                    _, outputs = model.forward_with_embeds(draw["X0"][None])
                    values = gap.official_gram_stable_rank(torch.stack(outputs)[:, 0])
                    rows += [
                        (label, gamma, T, seed, layer, value)
                        for layer, value in enumerate(values.tolist(), start=1)
                    ]
    return pd.DataFrame(rows, columns=[*KEYS, "gram_stable_rank"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (0: torch's default)"
    )
    parser.add_argument(
        "--official", type=Path, metavar="PATH", help="a checkout of the official code"
    )
    parser.add_argument(
        "--official-float32",
        action="store_true",
        help="also count the official metric's float32 overflows in our default engine",
    )
    args = parser.parse_args()
    if args.threads:
        runtime.use_threads(args.threads)
    official = load_official(args.official) if args.official else None
    names = ["stable_rank", "gram_stable_rank"]
    run(1, 1)  # warm-up, not timed: library start-up
    frame, (seconds, cpu), (official_seconds, official_cpu), official_values = timed_sweep(
        args.seeds, args.layers, official, args.threads
    )
    bad = int((~np.isfinite(frame[names].to_numpy())).sum())
    runs = frame.groupby(["variant", "gamma", "T", "seed"]).ngroups
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads: "
        f"{frame['variant'].nunique()} variants x {len(GAMMAS)} gammas x {len(T_VALUES)} T x "
        f"{args.seeds} seeds = {runs} runs of {args.layers} layers"
    )
    print(
        f"ours: wall time {seconds:.1f} s (CPU {cpu:.1f} s), summed over the (gamma, T) cells; "
        f"{frame[names].size} stable-rank values, {bad} non-finite"
    )
    last = frame[(frame["T"] == 150) & (frame["gamma"] == 1.0)]
    table = last.groupby(["variant", "layer"])["gram_stable_rank"].mean().unstack("layer")
    depths = [t for t in (1, 2, args.layers) if t in table.columns]
    print("sr(XX^T), mean over seeds, T = d = 150, at depths", depths)
    print(table[depths].round(2).to_string())

    double, *_ = run(args.seeds, args.layers, dtype=torch.float64)
    n_double, worst_double = worst_difference(frame, double, names)
    print(
        f"float32 against float64 on the same draws: {n_double} values, "
        f"worst relative difference {worst_double:.1e}"
    )
    failed = bad > 0 or not worst_double <= TOLERANCE
    if official is None:
        print("no --official PATH: the official code was not run (ours only)")
    else:
        n_official, bad_official = official_values.size, int((~np.isfinite(official_values)).sum())
        paired = official_on_our_draws(official, args.seeds, args.layers)
        n_compared, worst = worst_difference(frame, paired, ["gram_stable_rank"])
        bad_paired = int((~np.isfinite(paired["gram_stable_rank"])).sum())
        failed = failed or not (n_compared > 0 and worst <= TOLERANCE)
        ours = frame.loc[frame["layer"] > 0, "gram_stable_rank"].to_numpy()
        side = pd.DataFrame(
            {
                "ours (fast, float32)": [
                    f"{seconds:.1f}",
                    f"{cpu:.1f}",
                    f"{int((~np.isfinite(ours)).sum())} of {ours.size}",
                ],
                "official (float32)": [
                    f"{official_seconds:.1f}",
                    f"{official_cpu:.1f}",
                    f"{bad_official} of {n_official} ({bad_official / n_official:.1%})",
                ],
            },
            index=["wall time (s)", "CPU time (s)", "non-finite sr(XX^T), layers 1-L"],
        )
        print(side.to_string())
        print(
            f"speed-up {official_seconds / seconds:.1f}x in wall time, "
            f"{official_cpu / cpu:.1f}x in CPU time\n"
            f"official model on our draws: {bad_paired} of {len(paired)} non-finite; "
            f"{n_compared} finite sr(XX^T) values compared one by one with ours, "
            f"worst relative difference {worst:.1e} (tolerance {TOLERANCE:.0%})"
        )
    if args.official_float32:
        single, seconds, _ = run(
            args.seeds, args.layers, ("official_gram_stable_rank",), torch.float32, fast=False
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
    print("FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
