"""Colab and Binder launch buttons, turned on by one setting: the book's public repository.

Both services open a notebook from a git branch, so the buttons point at the branch the
site itself is published to (`collapse publish`, default `gh-pages`), where every page's
executed notebook lies at `_sources/<page>.ipynb` (Sphinx copies each page's source there).
A launch button on the MyST source would open raw text, and the executed notebooks are not
in the main branch.

- `settings(url, ...)` is what `collapse book` adds to the book's configuration: the
  theme's repository, branch and path, the two launch URLs and the site's base URL;
- the published tree gets a `binder/` folder (`write_binder`), so Binder builds what the
  repository's own `binder/` builds: the lock file (hash-checked, inlined), then `postBuild`
  (`postbuild`) with PyTorch's CPU build and the library at the commit that executed the
  pages, on Python 3.11 (the lock's), never the root environment.yml;
- every published notebook starts with `install_cell(...)`, which installs the distribution
  (`rank-collapse`: PyPI's `collapse` is another project) when it is missing (on Colab) and
  does nothing where it is installed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ..atomic import write_atomic
from ..checks import ParameterError

__all__ = [
    "BINDERHUB",
    "COLAB",
    "INSTALL_TAG",
    "check_url",
    "install_cell",
    "package_spec",
    "postbuild",
    "settings",
    "source_commit",
    "write_binder",
]

BINDERHUB = "https://mybinder.org"
COLAB = "https://colab.research.google.com"
DISTRIBUTION = "rank-collapse"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
RUNTIME = "python-3.11\n"  # repo2docker's Python: the lock's
INSTALL_TAG = "install-if-missing"
_GITHUB = re.compile(r"^https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")


def check_url(url: str) -> tuple[str, str]:
    """(owner, name) of a public GitHub repository URL; anything else is bad input (Colab
    opens notebooks from GitHub only)."""
    match = _GITHUB.match(url)
    if match is None:
        raise ParameterError(
            f"--repository {url!r}: a GitHub repository URL is needed, "
            "https://github.com/OWNER/REPO (Colab opens notebooks from GitHub)"
        )
    return match.group(1), match.group(2)


def source_commit(root: Path) -> str:
    """The commit of the checkout that executed the pages, or `main` outside a git checkout."""
    result = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return result.stdout.strip() if result.returncode == 0 else "main"


def package_spec(url: str, commit: str) -> str:
    """A pip requirement for the library (with the pretrained extra) at `commit`."""
    owner, name = check_url(url)
    return f"{DISTRIBUTION}[pretrained] @ git+https://github.com/{owner}/{name}@{commit}"


def settings(url: str, branch: str = "gh-pages", baseurl: str = "") -> dict:
    """The Jupyter Book configuration that turns on the launch buttons for `url`."""
    owner, name = check_url(url)
    return {
        "repository": {
            "url": f"https://github.com/{owner}/{name}",
            "branch": branch,
            "path_to_book": "_sources",
        },
        "launch_buttons": {
            "notebook_interface": "jupyterlab",
            "binderhub_url": BINDERHUB,
            "colab_url": COLAB,
        },
        "html": {
            "use_repository_button": True,
            "baseurl": baseurl or f"https://{owner.lower()}.github.io/{name}/",
        },
    }


def install_cell(spec: str) -> str:
    """The source of a notebook's first cell: install the library when it is missing."""
    return (
        "# On Colab (or any Jupyter without the library) this installs the companion at the\n"
        "# commit that executed this notebook; where it is installed, it does nothing.\n"
        "import importlib.metadata\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        "try:\n"
        f"    importlib.metadata.distribution({DISTRIBUTION!r})\n"
        "except importlib.metadata.PackageNotFoundError:\n"
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q",\n'
        f"                    {spec!r}], check=True)\n"
    )


def postbuild(library: str, torch_pin: str) -> str:
    """Binder's `postBuild`, run after the hash-checked lock: PyTorch's CPU build (its hash
    depends on the build, so it is pinned by version), then `library` (a path or a pip
    requirement) without dependencies: the lock has them all."""
    return (
        "#!/bin/bash\n"
        "# Binder runs this after installing requirements.txt (the lock).\n"
        "set -euo pipefail\n"
        f"python -m pip install --no-cache-dir --no-deps --index-url {CPU_INDEX} '{torch_pin}'\n"
        f"python -m pip install --no-cache-dir --no-deps '{library}'\n"
        "jupytext-config set-default-viewer  # a chapter's .md opens as a notebook\n"
    )


def _inlined(requirements: Path) -> list[str]:
    """The lines of a requirements file with each `-r FILE` replaced by that file's lines."""
    lines = []
    for line in requirements.read_text().splitlines():
        if line.startswith("-r "):
            lines += _inlined(requirements.parent / line[3:].strip())
        elif line.strip() and not line.lstrip().startswith("#"):
            lines.append(line)
    return lines


def write_binder(site: Path, requirements: Path, spec: str) -> Path:
    """`binder/` of the published tree from the repository's own `requirements` (the lock,
    inlined: the site has no requirements/ folder), with the library at `spec` in its
    postBuild; returns the requirements file written."""
    torch_pin = (requirements.parents[1] / "requirements" / "torch.txt").read_text().split()[0]
    folder = site / "binder"
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "runtime.txt", RUNTIME)
    script = write_atomic(folder / "postBuild", postbuild(spec, torch_pin))
    script.chmod(0o755)
    return write_atomic(
        folder / "requirements.txt",
        "# Binder for the published notebooks (written by `collapse book --repository`).\n"
        + "\n".join(_inlined(requirements))
        + "\n",
    )
