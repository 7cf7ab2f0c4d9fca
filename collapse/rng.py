"""Seeds to generators: the one path every random draw of the library takes.

A seed alone gives torch's own `Generator().manual_seed(seed)`, what a reader writes by
hand. A seed with stream keys (a layer, a role, a purpose) is mixed with them through
numpy's SeedSequence, so streams are independent and a draw does not depend on what
else was drawn before it: the same seed gives the same attention weights whatever the
variant, batch layout or set of seeds run beside it.

A chapter's seeds come from `seeds(n)`: 0, 1, ..., n - 1 in the book, and a disjoint family
of seeds when the chapter is rerun to check that its verdicts do not depend on the seeds
drawn (`collapse run --seed-family K`, `collapse reseed`; the runner sets
COLLAPSE_SEED_FAMILY for the notebook's kernel). Family K holds the seeds
K * FAMILY_SIZE + i.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from .checks import ParameterError, check_int

if TYPE_CHECKING:
    import torch

__all__ = ["generator", "check_seeds", "seeds", "seed", "seed_family", "FAMILY_SIZE", "FAMILY_ENV"]

FAMILY_SIZE = 1_000_000  # seeds per family: families never share a seed
FAMILY_ENV = "COLLAPSE_SEED_FAMILY"


def seed_family() -> int:
    """The seed family of this run: 0 (the book's seeds) unless COLLAPSE_SEED_FAMILY says."""
    text = os.environ.get(FAMILY_ENV, "0")
    if not text.isdigit():
        raise ParameterError(f"{FAMILY_ENV} must be an int >= 0, got {text!r}")
    return int(text)


def seed(base: int) -> int:
    """The seed standing for `base` in this run's family (`base` itself in family 0)."""
    base = check_int("seed", base, minimum=0)
    if base >= FAMILY_SIZE:
        raise ParameterError(f"seed must be < {FAMILY_SIZE} (one family's seeds), got {base}")
    return seed_family() * FAMILY_SIZE + base


def seeds(n: int, start: int = 0) -> list[int]:
    """`n` seeds of this run's family: start, ..., start + n - 1 in family 0."""
    n = check_int("n", n, minimum=1)
    return [seed(start + i) for i in range(n)]


def generator(seed: int, *streams: int) -> torch.Generator:
    import torch  # here, not above: the `collapse` command reads FAMILY_ENV without torch

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
