"""One prepared run on a machine with a CUDA GPU: the cuda code paths against the CPU, then one
paper-profile timing.

1. Equivalence on small inputs, float64, cuda vs cpu (relative 1e-10 unless noted):
   san.simulate (every variant), sweep.sweep, chunks.sweep (a chunk folder reused on
   a second call), random_markov (the same bits on both: drawn on the CPU) and the
   Lanczos top singular values (1e-9 of sigma_1), runtime.pick_device("auto") == cuda.
2. Timing: a fraction of notebook 06's paper profile through chunks.sweep on the GPU
   (the BERT-size SAN, 4 masks x 3 temperatures, --fraction-samples of its 3000
   samples; printed with the extrapolation to 3000), then `collapse run 07 --profile
   paper --force` as a whole, stopped at the time left before --limit seconds.

Exit status 0 when every check passes (and no timing overran), 1 otherwise; 0 with
a message when torch sees no GPU.

    python benchmarks/gpu_check.py [--limit 480] [--fraction-samples 250]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from collapse import chunks, cost, inputs, markov, masks, runtime, san, sweep

ROOT = Path(__file__).resolve().parents[1]
MASKS = ["complete", "causal", "sliding_window", "causal_sliding_window"]
failures: list[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures.append(name)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float(((a - b).abs() / b.abs().clamp_min(1e-300)).max())


def equivalence() -> None:
    check("pick_device('auto') is cuda", runtime.pick_device("auto").type == "cuda")
    X = inputs.embedding_inputs(4, 32, 64, seed=1)
    mask = masks.make("causal", 32)
    for variant in san.VARIANTS:
        config = san.SANConfig.bert(variant=variant, n_layers=6, d=64, n_heads=4)
        cpu = san.simulate(X, config, mask=mask, metrics=("mu", "stable_rank"), seed=2)
        gpu = san.simulate(X.cuda(), config, mask=mask, metrics=("mu", "stable_rank"), seed=2)
        worst = max(relative(gpu[m], cpu[m]) for m in ("mu", "stable_rank"))
        check(f"san.simulate {variant}", worst < 1e-10, f"max relative difference {worst:.1e}")
    configs = {
        v: san.SANConfig.bert(variant=v, n_layers=4, d=64, n_heads=4)
        for v in ("attention", "skip_ln", "full")
    }
    mask_set = {m: masks.make(m, 32) for m in MASKS}
    grid = dict(d_qk=[1.0, None], seed=[0, 1], batch_size=2)
    cpu = sweep.sweep(X, configs, mask_set, **grid)
    gpu = sweep.sweep(X.cuda(), configs, mask_set, **grid)
    worst = relative(torch.tensor(gpu["mu"].to_numpy()), torch.tensor(cpu["mu"].to_numpy()))
    check(
        "sweep.sweep",
        worst < 1e-10 and gpu.drop(columns="mu").equals(cpu.drop(columns="mu")),
        f"max relative difference {worst:.1e}",
    )
    with tempfile.TemporaryDirectory() as folder:
        first = chunks.sweep(X.cuda(), configs, mask_set, **grid, folder=folder)
        again = chunks.sweep(X.cuda(), configs, mask_set, **grid, folder=folder)
        check(
            "chunks.sweep on cuda equals sweep.sweep, and resumes",
            first.equals(gpu) and again.equals(gpu),
        )
    A_cpu = markov.random_markov(1024, generator=torch.Generator().manual_seed(0))
    A_gpu = markov.random_markov(1024, generator=torch.Generator().manual_seed(0), device="cuda")
    check("random_markov: same bits on both devices", torch.equal(A_gpu.cpu(), A_cpu))
    top_cpu = markov.top_singular_values(A_cpu, 2, method="lanczos")
    top_gpu = markov.top_singular_values(A_gpu, 2, method="lanczos")
    truth = torch.linalg.svdvals(A_cpu)[:2]
    worst = float(
        max((top_cpu - truth).abs().max(), (top_gpu.cpu() - truth).abs().max()) / truth[0]
    )
    check(
        "Lanczos top singular values, cuda and cpu vs full SVD",
        worst < 1e-9,
        f"max difference / sigma_1 {worst:.1e}",
    )


def fraction_timing(samples: int) -> None:
    """Notebook 06's BERT sweep at paper size on `samples` of its 3000 samples (one chunk of
    250 by default).
    """
    config = san.SANConfig.bert(variant="attention", n_layers=12)
    X = inputs.embedding_inputs(samples, 128, 768, seed=0, device="cuda")
    mask_set = {m: masks.make(m, 128) for m in MASKS}
    torch.cuda.synchronize()
    start = time.perf_counter()
    frame = chunks.sweep(X, {"san": config}, mask_set, d_qk=[1 / 64, 1.0, 64.0], batch_size=250)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    flops = cost.grid_flops({"san": config}, 128, 12 * samples)
    print(
        f"timing: notebook 06 BERT sweep, {samples} of 3000 samples, "
        f"float64 on {torch.cuda.get_device_name()}: {seconds:.1f} s, "
        f"{flops / seconds / 1e12:.2f} TFLOP/s; "
        f"all 3000 samples: ~{seconds * 3000 / samples:.0f} s ({len(frame)} rows)",
        flush=True,
    )


def notebook_timing(limit: float) -> None:
    command = [
        sys.executable,
        "-m",
        "collapse",
        "--root",
        str(ROOT),
        "run",
        "05",
        "--profile",
        "paper",
        "--force",
    ]
    start = time.perf_counter()
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=max(limit, 1),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    except subprocess.TimeoutExpired:
        check(
            "collapse run 07 --profile paper",
            False,
            f"stopped after {limit:.0f} s (the time left)",
        )
        return
    seconds = time.perf_counter() - start
    print(result.stdout[-3000:] + result.stderr[-3000:], flush=True)
    check(
        "collapse run 07 --profile paper",
        result.returncode == 0,
        f"{seconds:.1f} s wall, exit status {result.returncode}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--limit",
        type=float,
        default=480,
        help="seconds for the whole script (the notebook run gets what is left)",
    )
    parser.add_argument("--fraction-samples", type=int, default=250)
    args = parser.parse_args()
    start = time.perf_counter()
    if not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA GPU; nothing to check")
        return
    print(
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}",
        flush=True,
    )
    equivalence()
    fraction_timing(args.fraction_samples)
    notebook_timing(args.limit - (time.perf_counter() - start))
    print(
        f"gpu_check: {len(failures)} failed ({', '.join(failures) or 'none'}) "
        f"in {time.perf_counter() - start:.0f} s"
    )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
