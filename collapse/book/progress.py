"""Long loops' progress, shown to whoever runs the chapter and never recorded in it.

A loop of the library (a sweep's jobs, its layers) iterates through `bar`. Asked for
(`shown=True`: a sweep's `progress=True`) the bar is tqdm's on stderr, which a kernel records
in the executed notebook. Otherwise, when the runner has named a file in $COLLAPSE_PROGRESS
(`collapse run --progress`), the bar goes to that file as plain lines, one every PERIOD seconds
once the loop has run that long, and the runner prints them on its terminal, prefixed with the
chapter (collapse.book.runner). Why a file: a page of the book must not depend on whether
somebody watched it being computed. With neither, the bar is disabled and costs nothing per
step.

This module is tooling: editing it re-executes no chapter (collapse.provenance).
"""

from __future__ import annotations

import functools
import os
import re
import sys

from tqdm import tqdm

__all__ = ["ENV", "PERIOD", "bar"]

ENV = "COLLAPSE_PROGRESS"
PERIOD = 10.0  # seconds: a shorter loop says nothing, a longer one says a line this often
_BREAKS = re.compile(r"[\r\n]")


class _Lines:
    """A file that keeps each of tqdm's redraws ('\\r' and the status) as one whole line, so
    that whoever reads the file never sees half a status or a carriage return, and a status
    once (a bar that ends draws its last one again)."""

    def __init__(self, path: str):
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open while the kernel is)
        self._last = None

    def write(self, text: str) -> int:
        for part in _BREAKS.split(text):
            line = part.rstrip()
            if line.strip() and line != self._last:
                self._file.write(f"{line}\n")
                self._last = line
        self._file.flush()
        return len(text)

    def flush(self) -> None:
        self._file.flush()


@functools.cache
def _lines(path: str) -> _Lines:
    """One open file per path for the life of the process, whatever the number of bars."""
    return _Lines(path)


def bar(iterable=None, *, shown: bool = False, **options) -> tqdm:
    """A tqdm bar over `iterable` (tqdm's `options`): on stderr when `shown`, else as lines in
    the file $COLLAPSE_PROGRESS names, else disabled."""
    if shown:
        return tqdm(iterable, file=sys.stderr, **options)
    path = os.environ.get(ENV)
    try:
        lines = _lines(path) if path else None
    except OSError:  # the runner and its folder have gone: nobody reads the lines
        lines = None
    if lines is None:
        return tqdm(iterable, disable=True, **options)
    # position 0: a nested bar would otherwise move the cursor with terminal escapes
    quiet = {"mininterval": PERIOD, "delay": PERIOD, "ascii": True, "position": 0}
    return tqdm(iterable, file=lines, **{**quiet, **options})
