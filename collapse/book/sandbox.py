"""The sandbox a submission's kernel runs in while `collapse grade` grades it.

`sandbox(root, ...)` probes once what this machine allows and returns a `Sandbox`; for each
submission, `Sandbox.submission(work, protect)` is a context in which a kernel is started
confined (its connection file and ipc sockets under `work`), and on leaving it every process
the submission started is gone. `Sandbox.describe()` is the first line `collapse grade`
prints: what is confined and what the machine refused.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..checks import check_int
from . import runner

__all__ = ["Sandbox", "Confinement", "sandbox"]


@dataclass(frozen=True)
class Sandbox:
    """How a submission's kernel is confined: `offline` (its own empty network namespace),
    `readonly` (the project mounted read-only), and its memory limit in MB."""

    root: Path
    memory_mb: int
    offline: bool
    readonly: bool

    def prefix(self, protect: Path) -> list[str]:
        """The command a kernel is started under; `protect` (papermill's output folder) is
        mounted read-only beside the project."""
        script = f'ulimit -v {self.memory_mb * 1024} && exec "$@"'
        if self.readonly:
            mount = 'mount --bind -o ro "$1" "$1" && mount --bind -o ro "$2" "$2" && shift 2'
            return ["unshare", "-n", "-m", "sh", "-c", f"{mount} && {script}", "sh",
                    str(self.root), str(protect)]  # fmt: skip
        return [*(["unshare", "-n"] if self.offline else []), "sh", "-c", script, "sh"]

    def describe(self) -> str:
        network = (
            "no network (unshare -n)"
            if self.offline
            else "NETWORK NOT ISOLATED (unshare -n is not permitted here)"
        )
        files = (
            "project read-only (unshare -m)"
            if self.readonly
            else "project writable (a mount namespace is not permitted here)"
        )
        return f"{self.memory_mb} MB per kernel, {network}, {files}"

    @contextmanager
    def submission(self, work: Path, protect: Path):
        """A `Confinement` for one submission whose kernel lives in `work` (a fresh folder);
        on leaving, the submission's processes are gone."""
        confined = Confinement(
            runner.kernel_manager(
                self.prefix(protect),
                transport="ipc",
                ip=str(work / "kernel"),
                connection_file=str(work / "kernel.json"),
            )
        )
        yield confined


@dataclass
class Confinement:
    """One submission's confinement: the kernel manager class that starts its kernel, and why
    the sandbox stopped it (None while it runs within its limits)."""

    kernel_manager_class: type
    stopped: str | None = None


def _works(command: list[str]) -> bool:
    if shutil.which(command[0]) is None:
        return False
    return subprocess.run(command, capture_output=True).returncode == 0


@functools.cache
def _probe(root: Path) -> tuple[bool, bool]:
    """(offline, readonly): what this machine lets a kernel be confined to, tried once."""
    mount = 'mount --bind -o ro "$0" "$0"'
    readonly = _works(["unshare", "-n", "-m", "sh", "-c", mount, str(root)])
    return readonly or _works(["unshare", "-n", "true"]), readonly


def sandbox(root: Path, memory_mb: int = 4096) -> Sandbox:
    """The strongest confinement this machine allows for kernels grading in project `root`."""
    memory_mb = check_int("--memory", memory_mb, minimum=256)
    return Sandbox(Path(root).resolve(), memory_mb, *_probe(Path(root).resolve()))
