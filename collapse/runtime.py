"""Where the arithmetic runs: the device a `device` parameter names, and CPU threads.

Why a thread limit: the library's small dense problems (2-D counterexample steps,
Lanczos' tiny Ritz problems, chapters of 100 x 100 matrices) lose more to handing work
between threads than they gain, and much more on a busy machine.
"""

from __future__ import annotations

import torch

from .checks import ParameterError, check_choice, check_int

__all__ = ["DEVICES", "pick_device", "use_threads"]

DEVICES = ("cpu", "cuda", "auto")


def pick_device(name: str = "auto") -> torch.device:
    """The device a notebook's `device` parameter names: "auto" is cuda when torch sees a
    GPU, else cpu.

    Why: the paper profile should use a GPU wherever there is one without a per-machine
    setting, while asking for "cuda" where there is none must stop with one line, not
    quietly run for hours on the CPU.
    """
    check_choice("device", name, DEVICES)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ParameterError(
            "device cuda: torch sees no CUDA GPU here; use device=auto or device=cpu"
        )
    return torch.device(name)


class use_threads:  # noqa: N801 (used like a function)
    """`n` torch CPU threads from now on; as a context manager, until the block ends.

    `use_threads(1)` at the top of a chapter holds for the rest of its kernel;
    `with use_threads(1): ...` restores the previous count afterwards.
    """

    def __init__(self, n: int = 1):
        self.before = torch.get_num_threads()
        torch.set_num_threads(check_int("n", n, minimum=1))

    def restore(self) -> None:
        torch.set_num_threads(self.before)

    def __enter__(self) -> use_threads:
        return self

    def __exit__(self, *exc) -> None:
        self.restore()
