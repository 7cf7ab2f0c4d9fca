"""A local copy of MathJax 3 inside the built book, so that reading it makes no CDN request.

Sphinx loads MathJax from a CDN by default. `python -m
collapse.book.mathjax` (run by `make install`) takes the MathJax release pinned below from the
npm registry with npm itself, checks the tarball against the pinned sha512, and keeps only
what the TeX-to-HTML renderer needs: `tex-chtml.js`, the TeX extensions it autoloads (for
macros such as `\\boldsymbol`), its woff fonts and the licence, about 2 MB of the 24 MB
package. They land in `book/_static/mathjax/`, which is git-ignored; `_config.yml` points
Sphinx's `mathjax_path` there, and the book's own Sphinx extension (book/_ext/offline_book.py,
kept out of this package so that a build does not import torch) stops a build whose copy
is missing with one line that says how to get it; `require` lets `collapse book` say the
same before it spends minutes executing notebooks.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from ..checks import ParameterError

__all__ = ["VERSION", "FOLDER", "MathJaxError", "fetch", "install_from", "is_installed", "require"]

PACKAGE = "mathjax"
VERSION = "3.2.2"
INTEGRITY = (
    "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/"
    "O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=="
)
FOLDER = (
    Path("book") / "_static" / "mathjax"
)  # relative to the project root; `mathjax_path` is relative to book/_static
ENTRY = "tex-chtml.js"
STAMP = "VERSION"
# Members of the npm tarball to keep, and where they go inside FOLDER.
KEEP = {
    "package/LICENSE": "LICENSE",
    f"package/es5/{ENTRY}": ENTRY,
    "package/es5/input/tex/extensions/": "input/tex/extensions/",
    "package/es5/output/chtml/fonts/woff-v2/": "output/chtml/fonts/woff-v2/",
}
MISSING = (
    f"MathJax {VERSION} is missing from {FOLDER.as_posix()}: "
    "run `make install` or `python -m collapse.book.mathjax`"
)


class MathJaxError(RuntimeError):
    """The local MathJax copy is missing, or could not be fetched or verified."""


def is_installed(folder: Path) -> bool:
    """True when `folder` holds the pinned release (its entry script and a
    matching version stamp).
    """
    stamp = folder / STAMP
    return (folder / ENTRY).is_file() and stamp.is_file() and stamp.read_text().strip() == VERSION


def _npm_pack(workdir: Path) -> Path:
    """The pinned tarball, downloaded by npm (which checks it against the
    registry's own integrity).
    """
    npm = shutil.which("npm")
    if npm is None:
        raise MathJaxError(
            "npm not found: install Node.js and npm "
            f"to fetch {PACKAGE}@{VERSION} from the npm registry"
        )
    command = [npm, "pack", f"{PACKAGE}@{VERSION}", "--json", "--pack-destination", str(workdir)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise MathJaxError(f"npm pack {PACKAGE}@{VERSION} failed: {last}")
    return workdir / json.loads(result.stdout)[0]["filename"]


def _check_integrity(tarball: Path, integrity: str = INTEGRITY) -> None:
    algorithm, _, expected = integrity.partition("-")
    digest = base64.b64encode(hashlib.new(algorithm, tarball.read_bytes()).digest()).decode()
    if digest != expected:
        raise MathJaxError(
            f"{tarball.name}: {algorithm} is {digest}, expected the pinned {expected}"
        )


def _destination(member: str) -> str | None:
    """Where a tarball member goes inside FOLDER, or None when the renderer does not need it."""
    for source, target in KEEP.items():
        if member == source or (
            source.endswith("/") and member.startswith(source) and "/" not in member[len(source) :]
        ):
            return target + member[len(source) :] if source.endswith("/") else target
    return None


def install_from(tarball: Path, folder: Path, integrity: str = INTEGRITY) -> list[Path]:
    """Unpack what KEEP names from a verified npm tarball into `folder`, replacing it
    whole (never half-written).
    """
    _check_integrity(tarball, integrity)
    partial = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    written = []
    with tarfile.open(tarball, "r:gz") as archive:
        for member in archive.getmembers():
            target = _destination(member.name)
            if target is None or not member.isfile():
                continue
            path = partial / target
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.extractfile(member).read())
            written.append(folder / target)
    if not (partial / ENTRY).is_file():
        shutil.rmtree(partial)
        raise MathJaxError(f"{tarball.name} has no package/es5/{ENTRY}: not a MathJax 3 release")
    (partial / STAMP).write_text(VERSION + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return written


def fetch(root: Path, *, force: bool = False) -> Path:
    """Make sure `root`/book/_static/mathjax holds the pinned release; fetch it with npm when
    it does not.
    """
    folder = root / FOLDER
    if force or not is_installed(folder):
        with tempfile.TemporaryDirectory() as workdir:
            install_from(_npm_pack(Path(workdir)), folder)
    return folder


def require(root: Path) -> Path:
    """The project's MathJax folder, or a one-line ParameterError saying how to fetch it
    (for `collapse book`).
    """
    folder = root / FOLDER
    if not is_installed(folder):
        raise ParameterError(MISSING)
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m collapse.book.mathjax",
        description=f"Fetch {PACKAGE}@{VERSION} for the offline book.",
    )
    parser.add_argument(
        "--root", type=Path, default=Path.cwd(), help="the checkout (default: the current folder)"
    )
    parser.add_argument(
        "--force", action="store_true", help="fetch again even when the pinned release is there"
    )
    args = parser.parse_args(argv)
    folder = args.root / FOLDER
    fresh = args.force or not is_installed(folder)
    try:
        fetch(args.root, force=args.force)
    except MathJaxError as err:
        print(f"collapse.book.mathjax: error: {err}", file=sys.stderr)
        return 1
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    print(
        f"MathJax {VERSION} {'fetched into' if fresh else 'already in'} {folder} "
        f"({size / 1e6:.1f} MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
