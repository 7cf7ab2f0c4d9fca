"""Plan a run before it starts: each notebook's work, ETA and peak memory, nothing executed.

Every chapter has one code cell tagged `cost` that computes, from the parameters alone,
`work = cost.Work(flops=..., peak_bytes=..., dtype=...)`. The ETA divides those FLOP by
a GEMM rate measured now on each device, times the share of that rate the chapter
reached in its last recorded run here (book/executed/NAME.ipynb keeps its parameters,
device and seconds). The time outside the cells (kernel start) is added as a fixed cost; light
cells (figures, tables) count as work, so an ETA from a small recorded run errs long.
With no recorded run on a device the share is DEFAULT_EFFICIENCY, and the table says so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache

import torch

from .. import cost
from ..checks import ParameterError
from . import runner

__all__ = ["COST_TAG", "DEFAULT_EFFICIENCY", "Estimate", "work", "estimate", "table"]

COST_TAG = "cost"
DEFAULT_EFFICIENCY = 0.3


@dataclass(frozen=True)
class Estimate:
    """One notebook's plan. seconds: here on the CPU; device_seconds: on the device its
    parameters choose (None when that device is not on this machine)."""

    name: str
    work: cost.Work
    seconds: float
    device: str
    device_seconds: float | None
    basis: str
    cached: bool


def work(notebook: runner.Notebook, params: dict) -> cost.Work:
    """The notebook's `cost` cell evaluated on `params` (its own imports only; nothing else of
    the notebook runs)."""
    cells = [c for c in notebook.source().cells if COST_TAG in c.metadata.get("tags", [])]
    if len(cells) != 1:
        raise ParameterError(
            f"{notebook.name}: needs exactly one cell tagged {COST_TAG!r}, found {len(cells)}"
        )
    namespace = dict(params)
    exec(compile(cells[0].source, f"{notebook.name}, cost cell", "exec"), namespace)
    found = namespace.get("work")
    if not isinstance(found, cost.Work):
        raise ParameterError(f"{notebook.name}: its cost cell must set work = cost.Work(...)")
    return found


@cache
def _rate(dtype: str, device: str) -> float:
    return cost.gemm_rate(dtype, device)


def _recorded(project: runner.Project, notebook: runner.Notebook, device: str):
    """(its parameters, profile, seconds in cells, seconds outside them) of the notebook's last
    recorded run on `device`, or None."""
    path = project.executed_dir / f"{notebook.name}.ipynb"
    if not path.exists():
        return None
    executed = json.loads(path.read_text())
    meta = executed.get("metadata", {}).get("collapse", {})
    if meta.get("device", "cpu") != device or not meta.get("seconds"):
        return None
    in_cells = sum(
        c.get("metadata", {}).get("papermill", {}).get("duration") or 0.0
        for c in executed.get("cells", [])
    )
    in_cells = min(in_cells, meta["seconds"])
    return meta["parameters"], meta["profile"], in_cells, meta["seconds"] - in_cells


def _seconds(project, notebook, needed: cost.Work, device: str) -> tuple[float, str]:
    """(ETA on `device`, its basis): the recorded run's fixed cost (kernel start, outside its
    cells) plus the work at the share of the GEMM rate its cells reached."""
    rate = _rate(needed.dtype, device)
    record = _recorded(project, notebook, device)
    if record is None:
        return (
            needed.flops / (DEFAULT_EFFICIENCY * rate),
            f"assumed {DEFAULT_EFFICIENCY:g} of GEMM: no run on {device} here",
        )
    params, profile, in_cells, fixed = record
    done = work(notebook, params)
    share = min(done.flops / (max(in_cells, 1e-3) * _rate(done.dtype, device)), 1.0)
    seconds = fixed + needed.flops / (share * rate)
    return seconds, f"{share:.2g} of GEMM in its {profile} run ({in_cells + fixed:.0f} s)"


def estimate(
    project: runner.Project, planned, profile: str, *, force: bool = False
) -> list[Estimate]:
    """An Estimate per planned (notebook, params); a current result costs nothing unless
    `force` runs it again."""
    results = []
    for notebook, params in planned:
        needed = work(notebook, params)
        cached = not force and runner.is_current(project, notebook, params, profile)
        seconds, basis = _seconds(project, notebook, needed, "cpu")
        device = runner.device_of(params)
        device_seconds = seconds
        if device == "cuda" and torch.cuda.is_available():
            device_seconds, basis = _seconds(project, notebook, needed, "cuda")
        elif device == "cuda":
            device_seconds = None
        results.append(
            Estimate(notebook.name, needed, seconds, device, device_seconds, basis, cached)
        )
    return results


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "not here"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _scaled(value: float, unit: str, base: int, prefixes: str) -> str:
    """1.28e8 -> '128 M' + unit; one significant form for every size."""
    for prefix in prefixes[:-1]:
        if abs(value) < 999.5:
            return f"{value:.3g} {prefix}{unit}".replace("  ", " ")
        value /= base
    return f"{value:.3g} {prefixes[-1]}{unit}"


def _flops(value: float) -> str:
    return _scaled(value, "FLOP", 1000, " kMGTPE")


def _bytes(value: float) -> str:
    return _scaled(value, "B", 1024, [" ", "Ki", "Mi", "Gi", "Ti"])


def _memory_total() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def table(estimates: list[Estimate], profile: str) -> list[str]:
    """The plan as lines of text: one per notebook, then the total of what is not cached."""
    memory = _memory_total()
    cuda = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU here"
    lines = [
        f"{profile} profile: {torch.get_num_threads()} CPU threads, "
        f"{memory / 2**30:.0f} GiB; GEMM here {_rate('float64', 'cpu') / 1e9:.0f} GFLOP/s "
        f"(float64), {_rate('float32', 'cpu') / 1e9:.0f} GFLOP/s (float32); {cuda}",
        f"{'notebook':24} {'work':>11} {'ETA here':>9} {'ETA on device':>18} "
        f"{'peak memory':>11}  basis",
    ]
    for e in estimates:
        on_device = "cached" if e.cached else f"{_duration(e.device_seconds)} ({e.device})"
        here = "cached" if e.cached else _duration(e.seconds)
        warn = "  (more than this machine's memory)" if e.work.peak_bytes > memory else ""
        lines.append(
            f"{e.name:24} {_flops(e.work.flops):>11} {here:>9} {on_device:>18} "
            f"{_bytes(e.work.peak_bytes):>11}  {e.basis}{warn}"
        )
    todo = [e for e in estimates if not e.cached]
    here = sum(e.seconds for e in todo)
    chosen = [e.device_seconds for e in todo]
    on_device = None if None in chosen else sum(chosen)
    lines.append(
        f"{'total':24} {_flops(sum(e.work.flops for e in todo)):>11} "
        f"{_duration(here):>9} {_duration(on_device):>18} "
        f"{_bytes(max((e.work.peak_bytes for e in todo), default=0)):>11}  "
        f"{len(todo)} of {len(estimates)} notebooks to run, one after another"
    )
    return lines
