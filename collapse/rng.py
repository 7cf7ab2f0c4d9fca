"""Seeds to generators: the one path every random draw of the library takes.

A seed alone gives torch's own `Generator().manual_seed(seed)`, what a reader writes by
hand. A seed with stream keys (a layer, a role, a purpose) is mixed with them through
numpy's SeedSequence, so streams are independent and a draw does not depend on what
else was drawn before it: the same seed gives the same attention weights whatever the
variant, batch layout or set of seeds run beside it.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable

import numpy as np
import torch

from .checks import ParameterError, check_int

__all__ = ["generator", "check_seeds"]


def generator(seed: int, *streams: int) -> torch.Generator:
    """A CPU generator for `seed`, or for the independent stream (seed, *streams)."""
    seed = check_int("seed", seed, minimum=0)
    if not streams:
        return torch.Generator().manual_seed(seed)
    keys = [seed, *(check_int("stream", s, minimum=0) for s in streams)]
    state = np.random.SeedSequence(keys).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def check_seeds(seed) -> list[int]:
    """An int seed or a non-empty iterable of them, as a list of ints >= 0."""
    iterable = isinstance(seed, Iterable) and not isinstance(seed, (str, numbers.Integral))
    seeds = list(seed) if iterable else [seed]
    if not seeds:
        raise ParameterError(
            "seed must be an int >= 0 or a non-empty sequence of them, got an empty sequence"
        )
    return [check_int("seed", s, minimum=0) for s in seeds]
