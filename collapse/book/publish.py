"""`collapse publish`: the built site committed to a `gh-pages` branch, for readers without
GitHub Actions (the workflow deploys with actions/deploy-pages instead).

Plain git in a scratch folder: the branch's history is kept (each publish is one commit on
top), and `.nojekyll` is added so that GitHub Pages serves `_static/` and `_images/` as they
are instead of running Jekyll, which drops folders whose names start with an underscore.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..checks import ParameterError

__all__ = ["publish"]

_IDENTITY = ["-c", "user.name=collapse publish", "-c", "user.email=collapse@localhost"]


def _git(folder: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["git", "-C", str(folder), *_IDENTITY, *args], capture_output=True, text=True
    )
    if check and result.returncode:
        raise ParameterError(f"git {args[0]} failed: {result.stderr.strip().splitlines()[-1]}")
    return result


def _default_remote(root: Path) -> str:
    result = subprocess.run(
        ["git", "-C", str(root), "remote", "get-url", "origin"], capture_output=True, text=True
    )
    if result.returncode:
        raise ParameterError(
            "--remote is needed: this checkout has no remote 'origin' to publish to"
        )
    return result.stdout.strip()


def publish(root: Path, remote: str | None = None, branch: str = "gh-pages") -> str:
    """Commit root/_build/html to `branch` of `remote` (default: origin) and push it;
    returns the new commit's id."""
    site = root / "_build" / "html"
    if not (site / "index.html").is_file():
        raise ParameterError(f"no built book in {site}: run `collapse book` first")
    remote = remote or _default_remote(root)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch) / "site"
        shutil.copytree(site, work)
        (work / ".nojekyll").touch()
        _git(work, "init", "-q")
        _git(work, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
        if _git(work, "fetch", "-q", remote, branch, check=False).returncode == 0:
            _git(work, "reset", "-q", "--soft", "FETCH_HEAD")  # on top of what is published
        _git(work, "add", "-A")
        _git(work, "commit", "-q", "--allow-empty", "-m", "Publish the book (collapse publish)")
        _git(work, "push", "-q", remote, f"HEAD:refs/heads/{branch}")
        return _git(work, "rev-parse", "HEAD").stdout.strip()
