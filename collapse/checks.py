"""Argument checks that fail early with one line naming the parameter and what is allowed.

Every error is a `ParameterError` (a `ValueError`), so the command line can map bad
input to exit status 2 without catching genuine bugs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable


class ParameterError(ValueError):
    """A caller passed a value outside what a parameter allows."""


def check_int(name: str, value, *, minimum: int | None = None) -> int:
    """Return `value` as an int, or raise naming `name` and the allowed range."""
    allowed = "an int" if minimum is None else f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ParameterError(f"{name} must be {allowed}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ParameterError(f"{name} must be {allowed}, got {value!r}")
    return int(value)


def check_float(
    name: str, value, *, minimum: float | None = None, positive: bool = False
) -> float:
    """Return `value` as a float, or raise naming `name` and the allowed range.

    NaN and the infinities are refused: every comparison with NaN is false, so NaN would pass
    any range, and an infinite size, rate or tolerance only gives NaN or a run that never ends."""
    if positive:
        allowed = "a number > 0"
    elif minimum is not None:
        allowed = f"a number >= {minimum}"
    else:
        allowed = "a number"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"{name} must be {allowed}, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ParameterError(f"{name} must be {allowed} and finite, got {value!r}")
    if (positive and value <= 0) or (minimum is not None and value < minimum):
        raise ParameterError(f"{name} must be {allowed}, got {value!r}")
    return value


def check_choice(name: str, value, choices: Iterable[str]) -> str:
    """Return `value` if it is one of `choices`, else raise listing them."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise ParameterError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


def check_matrix(name: str, tensor, *, square: bool = False, min_ndim: int = 2):
    """Check that `tensor` has at least two dims (and square last two when asked)."""
    shape = tuple(getattr(tensor, "shape", ()))
    if len(shape) < min_ndim:
        raise ParameterError(
            f"{name} must have at least {min_ndim} dims (..., rows, cols), got shape {shape}"
        )
    if square and shape[-1] != shape[-2]:
        raise ParameterError(f"{name} must be square in its last two dims, got shape {shape}")
    return tensor
