"""What each chapter's run asks of the machine, computed from its parameters alone.

A chapter's hidden ``cost`` cell is one call::

    from collapse import workloads
    work = workloads.of("spectral-gap", globals())

and ``collapse run --dry-run`` evaluates that cell and nothing else. The formulas (FLOP
counts and peak memory, derived from what each chapter runs) live here, one function per
chapter, so that the chapter's page shows none of this bookkeeping: `wu` holds the
chapters on Wu et al., `mind_the_gap` those on Nait Saada et al.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping

from ..checks import ParameterError
from ..cost import Work

__all__ = ["formula", "of", "slugs"]

_FORMULAS: dict[str, Callable[..., Work]] = {}


def formula(slug: str):
    """Register the decorated function as chapter `slug`'s workload formula."""

    def register(function: Callable[..., Work]) -> Callable[..., Work]:
        if slug in _FORMULAS:
            raise ValueError(f"a workload formula for {slug!r} is already registered")
        _FORMULAS[slug] = function
        return function

    return register


def slugs() -> list[str]:
    """The chapters that have a formula, by slug (the file name without its number)."""
    _load()
    return sorted(_FORMULAS)


def of(slug: str, parameters: Mapping) -> Work:
    """The work of chapter `slug` for `parameters` (a chapter passes ``globals()``).

    Parameters
    ----------
    slug : str
        The chapter's file name without its number, e.g. ``"spectral-gap"``.
    parameters : Mapping
        At least the formula's arguments, by name; other keys are ignored.

    Returns
    -------
    Work
        FLOPs, peak bytes and dtype of the chapter's run.
    """
    _load()
    if slug not in _FORMULAS:
        raise ParameterError(f"slug must be one of {sorted(_FORMULAS)}, got {slug!r}")
    function = _FORMULAS[slug]
    names = list(inspect.signature(function).parameters)
    missing = [name for name in names if name not in parameters]
    if missing:
        raise ParameterError(f"{slug}: the workload needs the parameters {missing}")
    return function(**{name: parameters[name] for name in names})


def _load() -> None:
    from . import mind_the_gap, wu  # noqa: F401 (their formulas register themselves)
