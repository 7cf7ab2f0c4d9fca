"""`collapse publish`: the built site as the one commit of a `gh-pages` branch, for readers
without GitHub Actions (the workflow deploys with actions/deploy-pages as well).

ghp-import writes the commit: the site's files plus `.nojekyll` (so that GitHub Pages serves
`_static/` and `_images/` as they are instead of running Jekyll, which drops folders whose
names start with an underscore), with no parent (its `no_history`), so the branch that Binder
clones holds one site, never every PDF and image published before. ghp-import works on the
git repository of the current folder; to leave the user's checkout alone it runs in a scratch
repository (`git init` in a temporary folder, entered for the call), and the branch is then
pushed from there with `--force`. Git's own diagnosis comes back as one line.

This module and the command's path to it import nothing but the standard library and
ghp-import: `pip install --no-deps rank-collapse` and `pip install ghp-import` are enough.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ..checks import ParameterError

__all__ = ["HELP", "add_arguments", "main", "publish", "requested"]

HELP = "commit the built site (_build/html) as the one commit of a gh-pages branch and push it"
_MESSAGE = "Publish the book (collapse publish)"
_IDENTITY = {"user.name": "collapse publish", "user.email": "collapse@localhost"}
_DIAGNOSIS = re.compile(r"(fatal|error): |! ")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options, one definition for the full `collapse` parser and the light one."""
    parser.add_argument(
        "--remote",
        help="a git URL or path not beginning with '-' (default: this checkout's origin)",
    )
    parser.add_argument("--branch", default="gh-pages", help="the branch (default: gh-pages)")


def requested(argv=None) -> bool:
    """Whether the command line asks for `publish`: read without the book extra, which the
    other commands need and publishing does not."""
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--root")
    peek.add_argument("command", nargs="?")
    known, _ = peek.parse_known_args(argv)
    return known.command == "publish"


def main(argv=None) -> int:
    """`collapse [--root DIR] publish [--remote R] [--branch B]`: exit status 2 and one line
    on bad input or a failed push, as every command."""
    parser = argparse.ArgumentParser(prog="collapse")
    parser.add_argument(
        "--root",
        type=Path,
        help="the checkout to work in (default: found from the current folder)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    add_arguments(commands.add_parser("publish", help=HELP))
    args, unknown = parser.parse_known_args(argv)
    try:
        if unknown:  # one line, as the other commands say it
            kind = "option" if unknown[0].startswith("-") else "argument"
            raise ParameterError(f"unrecognized {kind} {unknown[0]} (see collapse publish --help)")
        root = _project_root(args.root)
        commit = publish(root, args.remote, args.branch)
    except ParameterError as err:
        print(f"collapse: error: {err}", file=sys.stderr)
        return 2
    print(f"published {root / '_build' / 'html'} as {args.branch} {commit[:12]}")
    return 0


def publish(root: Path, remote: str | None = None, branch: str = "gh-pages") -> str:
    """Make root/_build/html the one commit of `branch` on `remote` (default: origin), pushed
    with force; returns the commit's id."""
    root = Path(root).resolve()  # the work below runs in a scratch folder
    site = root / "_build" / "html"
    if not (site / "index.html").is_file():
        raise ParameterError(f"no built book in {site}: run `collapse book` first")
    _check_branch(branch)
    url = _remote_url(root, remote)
    try:
        from ghp_import import GhpError, ghp_import
    except ImportError:
        raise ParameterError("publishing needs ghp-import: pip install ghp-import") from None
    with tempfile.TemporaryDirectory() as scratch:
        _git(scratch, "init", "-q")
        for key, value in _IDENTITY.items():
            _git(scratch, "config", key, value)
        try:
            with contextlib.chdir(scratch):
                ghp_import(str(site), branch=branch, mesg=_MESSAGE, nojekyll=True, no_history=True)
        except GhpError as err:
            raise ParameterError(f"ghp-import failed: {_reason(err.message)}") from None
        commit = _git(scratch, "rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}")
        ref = f"refs/heads/{branch}"
        pushed = subprocess.run(
            ["git", "-C", scratch, "push", "--quiet", "--force", "--", url, f"{ref}:{ref}"],
            capture_output=True,
            text=True,
        )
        if pushed.returncode:
            raise ParameterError(f"cannot push to {_shown(url)}: {_shown(_reason(pushed.stderr))}")
        return commit


def _project_root(start: Path | None) -> Path:
    """The nearest folder at or above `start` (default: cwd) with notebooks/profiles.yml: the
    rule of runner.Project.find, without importing the runner (PyYAML, numpy)."""
    here = Path(start or Path.cwd()).resolve()
    package = Path(__file__).resolve().parents[2]
    for folder in (here, *here.parents, package):
        if (folder / "notebooks" / "profiles.yml").is_file():
            return folder
    raise ParameterError(
        f"no project found: run from a checkout (a folder with notebooks/profiles.yml), not {here}"
    )


def _check_branch(branch: str) -> None:
    """A name git takes as a branch, and never as an option."""
    valid = subprocess.run(
        ["git", "check-ref-format", f"refs/heads/{branch}"], capture_output=True
    ).returncode
    if branch.startswith("-") or valid:
        raise ParameterError(
            f"--branch must be a git branch name not beginning with '-', got {branch!r}"
        )


def _remote_url(root: Path, remote: str | None) -> str:
    """What to push to: `remote`, or the checkout's origin; a local path made absolute, since
    the push runs in a scratch folder. One beginning with '-' would be read as an option."""
    base = Path.cwd()
    if remote is None:
        origin = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"], capture_output=True, text=True
        )
        if origin.returncode:
            raise ParameterError(
                "--remote is needed: this checkout has no remote 'origin' to publish to"
            )
        remote, base = origin.stdout.strip(), root
    if remote.startswith("-") or not remote:
        raise ParameterError(
            f"--remote must be a git URL or path not beginning with '-', got {_shown(remote)!r}"
        )
    local = base / remote
    return str(local.resolve()) if local.exists() else remote


def _git(folder: str, *args: str) -> str:
    """git in the scratch repository; its stdout, or one line saying why it failed."""
    result = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True)
    if result.returncode:
        raise ParameterError(f"git {args[0]} failed: {_reason(result.stderr)}")
    return result.stdout.strip()


def _reason(stderr: str) -> str:
    """git's diagnosis as one whole line: its `fatal:`, `error:` and `!` (rejected) lines,
    without the advice that follows them ("Please make sure you have the correct access ...")."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    told = [re.sub(r"^(fatal|error): ", "", line) for line in lines if _DIAGNOSIS.match(line)]
    return "; ".join(told or lines[-1:]) or "git gave no reason"


def _shown(text: str) -> str:
    """`text` with the credentials of any URL in it blanked (a token in a remote's URL)."""
    return re.sub(r"(\w+://)[^/@\s]+@", r"\1***@", text)
