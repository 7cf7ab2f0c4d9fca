"""An interrupted-then-resumed chunked sweep, compared bit for bit with an uninterrupted one.

The sweep is the paper profile's BERT-size grid of notebook 06 (attention-only SAN,
d = 768, 12 heads, N = 128, 12 layers, 4 masks x 3 temperatures, float64) with a small
override: --samples sequences in chunks of --batch. Three runs, each a fresh process:

1. uninterrupted, into folder A;
2. into folder B, stopped by SIGINT (Ctrl-C) or SIGKILL once --stop-after chunk files exist;
3. resumed in folder B.

Then every chunk file and the final metrics of B must equal A's, byte for byte.

    python benchmarks/chunked_resume.py [--samples 8] [--batch 1] [--stop-after 3]
        [--signal INT|KILL]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MASKS = ["complete", "causal", "sliding_window", "causal_sliding_window"]


def work(folder: Path, samples: int, batch: int) -> None:
    """The sweep itself (run in a child process); writes the metric columns of its
    frame to folder/result.npy.
    """
    from collapse import chunks, inputs, masks, san

    signal.signal(
        signal.SIGINT, signal.default_int_handler
    )  # Ctrl-C, even when started from a shell that ignores SIGINT (nohup, &)

    config = san.SANConfig.bert(variant="attention", n_layers=12)
    X0 = inputs.embedding_inputs(samples, 128, 768, seed=0)
    frame = chunks.sweep(
        X0,
        {"san": config},
        {m: masks.make(m, 128) for m in MASKS},
        d_qk=[1 / 64, 1.0, 64.0],
        batch_size=batch,
        folder=folder,
    )
    np.save(
        folder / "result.npy",
        frame[["d_qk", "seed", "sample", "layer", "mu"]].to_numpy(dtype=float),
        allow_pickle=False,
    )


def child(folder: Path, args) -> subprocess.Popen:
    command = [
        sys.executable,
        __file__,
        "--work",
        str(folder),
        "--samples",
        str(args.samples),
        "--batch",
        str(args.batch),
    ]
    return subprocess.Popen(command)


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.npy"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument(
        "--stop-after", type=int, default=3, help="chunk files written before the signal"
    )
    parser.add_argument("--signal", choices=["INT", "KILL"], default="INT")
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work:
        return work(args.work, args.samples, args.batch)
    with tempfile.TemporaryDirectory() as scratch:
        whole, resumed = Path(scratch) / "uninterrupted", Path(scratch) / "resumed"
        start = time.perf_counter()
        if child(whole, args).wait():
            raise SystemExit("the uninterrupted run failed")
        print(
            f"uninterrupted: {len(files(whole)) - 1} chunks in {time.perf_counter() - start:.1f} s"
        )
        process = child(resumed, args)
        while len(list(resumed.glob("chunk-*.npy"))) < args.stop_after and process.poll() is None:
            time.sleep(0.05)
        process.send_signal(getattr(signal, f"SIG{args.signal}"))
        status = process.wait()
        print(
            f"interrupted: SIG{args.signal} after "
            f"{len(list(resumed.glob('chunk-*.npy')))} chunk files (exit status {status})"
        )
        start = time.perf_counter()
        if child(resumed, args).wait():
            raise SystemExit("the resumed run failed")
        print(f"resumed: finished in {time.perf_counter() - start:.1f} s")
        a, b = files(whole), files(resumed)
        same = a == b
        print(f"bitwise identical: {same} ({len(a)} files compared: {', '.join(a)})")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
