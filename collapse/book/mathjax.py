"""A local copy of MathJax 3 inside the built book, so that reading it makes no CDN request.

Sphinx loads MathJax from a CDN by default. The PyPI package `sphinx-mathjax-offline` (in the
`book` extra) ships MathJax 3.2.2's es5 build, the same release as on the npm registry, so pip
alone brings it: no npm, no network here. `python -m collapse.book.mathjax` (run by `make
install`) copies from it only what the TeX-to-HTML renderer needs: `tex-chtml.js`, the TeX
extensions it autoloads (for macros such as `\\boldsymbol`) and its woff fonts, about 2 MB of
the 24 MB package. Each file must match the sha256 that pip recorded in the package's RECORD
(so a file changed after the install is named), and the kept set must match the digests
pinned below (computed from npm's own tarball of 3.2.2 and from the package: they agree).
The copy lands in `book/_static/mathjax/` with a version stamp and a licence notice (the
package does not ship MathJax's LICENSE); the folder is git-ignored. `_config.yml` points
Sphinx's `mathjax_path` there, and the book's own Sphinx extension (book/_ext/offline_book.py,
kept out of this package so that a build does not import torch) stops a build whose copy is
missing with one line that says how to get it; `require` lets `collapse book` say the same
before it spends minutes executing notebooks.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata
import shutil
import sys
from pathlib import Path

from ..checks import ParameterError

__all__ = ["VERSION", "FOLDER", "MathJaxError", "fetch", "install_from", "is_installed", "require"]

VERSION = "3.2.2"
DISTRIBUTION = "sphinx-mathjax-offline"
DISTRIBUTION_VERSION = "0.0.2"
SOURCE = f"{DISTRIBUTION}/static/mathjax/"  # where the package keeps MathJax, in its RECORD
ENTRY = "tex-chtml.js"
# The kept files' sha256: the entry script's, and one over the sorted "path sha256\n" lines.
ENTRY_SHA256 = "0a6ded5abbce13331658dd239f34382abd06492c74b71b61e8caa8112ec55fa5"
FILES_SHA256 = "2503fd8486eb0d10ed83e81ddd541477292b371b854836fcbcb51e3e7aba24bd"
KEEP_FOLDERS = ("input/tex/extensions/", "output/chtml/fonts/woff-v2/")  # their files, not below
FOLDER = (
    Path("book") / "_static" / "mathjax"
)  # relative to the project root; `mathjax_path` is relative to book/_static
STAMP = "VERSION"
REINSTALL = f"pip install --force-reinstall {DISTRIBUTION}=={DISTRIBUTION_VERSION}"
NOT_INSTALLED = (
    f"{DISTRIBUTION} is not installed: pip install {DISTRIBUTION}=={DISTRIBUTION_VERSION} "
    "(or make install)"
)
MISSING = (
    f"MathJax {VERSION} is missing from {FOLDER.as_posix()}: "
    "run `make install` or `python -m collapse.book.mathjax`"
)
NOTICE = """\
MathJax {version} (https://www.mathjax.org), by the MathJax Consortium, is licensed under the
Apache License, Version 2.0: https://www.apache.org/licenses/LICENSE-2.0

The files in this folder, except this one and VERSION, are part of MathJax's es5 build, copied
unchanged from the PyPI package {name} {package_version}, which does not ship MathJax's
LICENSE file.
"""


class MathJaxError(RuntimeError):
    """The local MathJax copy is missing, or could not be copied or verified."""


def is_installed(folder: Path) -> bool:
    """True when `folder` holds the pinned release (its entry script and a
    matching version stamp).
    """
    stamp = folder / STAMP
    return (folder / ENTRY).is_file() and stamp.is_file() and stamp.read_text().strip() == VERSION


def _kept(relative: str) -> bool:
    """Whether the renderer needs this file of the package's MathJax folder."""
    return relative == ENTRY or any(
        relative.startswith(top) and "/" not in relative[len(top) :] for top in KEEP_FOLDERS
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _recorded(entry) -> str | None:
    """The hex sha256 that pip wrote for a file in the package's RECORD, if any."""
    if entry.hash is None or entry.hash.mode != "sha256":
        return None
    value = entry.hash.value
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def _read_verified(package: importlib.metadata.Distribution) -> dict[str, bytes]:
    """The kept files of an installed sphinx-mathjax-offline, by path inside FOLDER, each
    checked against the package's RECORD (a file changed since the install is named) and
    all against the pinned digests (another release is refused).
    """
    where = f"{DISTRIBUTION} {package.version}"
    if package.files is None:
        raise MathJaxError(f"{where} has no RECORD of its files: {REINSTALL}")
    files, paths = {}, {}
    for entry in package.files:
        relative = entry.as_posix().removeprefix(SOURCE)
        if relative == entry.as_posix() or not _kept(relative):
            continue
        path = paths[relative] = Path(entry.locate())
        if not path.is_file():
            raise MathJaxError(f"{path} is missing: {REINSTALL}")
        files[relative] = path.read_bytes()
        if _sha256(files[relative]) != _recorded(entry):
            raise MathJaxError(
                f"{path} does not match its sha256 in the RECORD of {where} "
                f"(changed since it was installed): {REINSTALL}"
            )
    pin = f"pip install {DISTRIBUTION}=={DISTRIBUTION_VERSION}"
    if ENTRY not in files:
        raise MathJaxError(f"{where} has no {SOURCE}{ENTRY}: {pin}")
    if _sha256(files[ENTRY]) != ENTRY_SHA256:
        raise MathJaxError(f"{paths[ENTRY]} is not MathJax {VERSION}'s ({where}): {pin}")
    listing = "".join(f"{name} {_sha256(files[name])}\n" for name in sorted(files))
    if _sha256(listing.encode()) != FILES_SHA256:
        raise MathJaxError(
            f"{where}: the TeX extensions or fonts in {paths[ENTRY].parent} are not "
            f"MathJax {VERSION}'s (their digest is not the pinned one): {pin}"
        )
    return files


def install_from(package: importlib.metadata.Distribution, folder: Path) -> list[Path]:
    """Copy the verified kept files of `package` into `folder`, with a version stamp and a
    licence notice, replacing the folder whole (never half-written).
    """
    files = _read_verified(package)
    partial = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    for relative, data in files.items():
        path = partial / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    notice = NOTICE.format(
        version=VERSION, name=package.metadata["Name"], package_version=package.version
    )
    (partial / "LICENSE").write_text(notice)
    (partial / STAMP).write_text(VERSION + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return [folder / relative for relative in files]


def fetch(root: Path, *, force: bool = False) -> Path:
    """Make sure `root`/book/_static/mathjax holds the pinned release; copy it from the
    installed sphinx-mathjax-offline when it does not.
    """
    folder = root / FOLDER
    if force or not is_installed(folder):
        try:
            package = importlib.metadata.distribution(DISTRIBUTION)
        except importlib.metadata.PackageNotFoundError:
            raise MathJaxError(NOT_INSTALLED) from None
        install_from(package, folder)
    return folder


def require(root: Path) -> Path:
    """The project's MathJax folder, or a one-line ParameterError saying how to get it
    (for `collapse book`).
    """
    folder = root / FOLDER
    if not is_installed(folder):
        raise ParameterError(MISSING)
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m collapse.book.mathjax",
        description=f"Copy MathJax {VERSION} from {DISTRIBUTION} for the offline book.",
    )
    parser.add_argument(
        "--root", type=Path, default=Path.cwd(), help="the checkout (default: the current folder)"
    )
    parser.add_argument(
        "--force", action="store_true", help="copy again even when the pinned release is there"
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
        f"MathJax {VERSION} {'copied into' if fresh else 'already in'} {folder} "
        f"({size / 1e6:.1f} MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
