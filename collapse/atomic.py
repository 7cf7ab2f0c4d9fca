"""Files written whole or not at all: a temporary file beside the target, then a rename.

Why one helper: notebooks, verdict records, chunks of a sweep, gradebooks and pages are read
while other processes write them (a second `collapse run`, a reader of the book, a resumed
sweep); a reader must never see half a file, and a crash must leave the old file or none.
The temporary file is created exclusively under a fresh name (never one planted in
advance), and removed when the write fails.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_atomic"]

_UMASK = os.umask(0o022)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path) -> Iterator[Path]:
    """A fresh temporary path beside `path` to write to; it replaces `path` when the block ends.

    Parameters
    ----------
    path : str or Path
        The file to write; its folder must exist.

    Yields
    ------
    Path
        An empty file in the same folder (so the rename is atomic), readable as the target
        would be; removed if the block raises.

    Examples
    --------
    >>> import json, pathlib, tempfile
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.json"
    >>> with atomic_path(target) as partial:
    ...     _ = partial.write_text(json.dumps({"a": 1}))
    >>> target.read_text()
    '{"a": 1}'
    """
    path = Path(path)
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    os.close(handle)
    partial = Path(name)
    try:
        os.chmod(partial, 0o666 & ~_UMASK)  # mkstemp's 0600 would make the file private
        yield partial
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def write_atomic(path, data: str | bytes, *, sync: bool = False) -> Path:
    """Write `data` (text as UTF-8) to `path` through `atomic_path`; `sync`: flush it to disk
    before the rename (a resumable sweep's chunks). Returns the path."""
    with atomic_path(path) as partial, open(partial, "wb") as stream:
        stream.write(data.encode() if isinstance(data, str) else data)
        if sync:
            stream.flush()
            os.fsync(stream.fileno())
    return Path(path)
