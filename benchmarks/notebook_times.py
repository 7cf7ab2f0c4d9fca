"""Every chapter's time in a profile, against its budget: the fast profile's ~30 s each.

Why a benchmark and not a test: a chapter's wall time depends on what else the machine
is doing, and a test that fails on a busy machine fails for the wrong reason. This one
executes each chapter afresh (papermill, in a scratch copy of the sources, so the book's
own book/executed/ is untouched), one after another in this process's environment, and
prints its seconds and the ratio to the budget. To tell a slow chapter from a busy
machine it first times a fixed float64 matmul and prints the rate, then does so again at
the end: a rate that fell means the machine was loaded while the chapters ran.

    python benchmarks/notebook_times.py [NAME ...] [--profile fast] [--budget 30]

Exit status 0 whatever the times (2 for bad arguments).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from collapse import ParameterError
from collapse.book import runner

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = {"fast": 30.0, "book": 180.0}  # seconds per chapter on 2 CPU cores (README)


def matmul_gflops() -> float:
    """Best-of-5 float64 rate of a 1024 x 768 x 768 matmul, in GFLOP/s: the machine's state."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(1024, 768, generator=g, dtype=torch.float64)
    B = torch.randn(768, 768, generator=g, dtype=torch.float64)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        A @ B
        best = min(best, time.perf_counter() - start)
    return 2 * 1024 * 768 * 768 / best / 1e9


def scratch_project(folder: Path) -> runner.Project:
    """The notebooks and the files they read, copied, so executed outputs stay out of book/."""
    shutil.copytree(ROOT / "notebooks", folder / "notebooks")
    return runner.Project(folder)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="chapters (default: all)")
    parser.add_argument("--profile", default="fast", help="fast, book or paper (default: fast)")
    parser.add_argument(
        "--budget", type=float, help="seconds per chapter (default: the profile's)"
    )
    args = parser.parse_args(argv)
    budget = args.budget or BUDGETS.get(args.profile)
    if budget is None or budget <= 0:
        print("notebook_times: error: --budget must be a number > 0", file=sys.stderr)
        return 2
    before = matmul_gflops()
    print(f"machine: float64 matmul {before:.1f} GFLOP/s before the chapters")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        project = scratch_project(Path(scratch))
        try:
            planned = runner.plan(project, args.names, args.profile, {})
        except ParameterError as err:
            print(f"notebook_times: error: {err}", file=sys.stderr)
            return 2
        for notebook, params in planned:
            result = runner.execute(project, notebook, params, args.profile, force=True)
            ratio = result.seconds / budget
            rows.append((notebook.name, result.seconds, ratio))
            flag = "  OVER BUDGET" if ratio > 1 else ""
            print(
                f"{notebook.name:26} {result.seconds:6.1f} s  budget {budget:.0f} s  "
                f"ratio {ratio:4.2f}{flag}",
                flush=True,
            )
    after = matmul_gflops()
    within = sum(ratio <= 1 for _, _, ratio in rows)
    total = sum(seconds for _, seconds, _ in rows)
    print(
        f"{within} of {len(rows)} chapters within {budget:.0f} s ({args.profile} profile); "
        f"{total:.0f} s in all; worst ratio {max(r for _, _, r in rows):.2f}"
    )
    print(f"machine: float64 matmul {after:.1f} GFLOP/s after ({after / before:.2f} x before)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
