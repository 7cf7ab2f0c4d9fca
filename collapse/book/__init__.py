"""The book's tooling, used only by the `collapse` command: nothing here computes a number.

    runner       execute notebooks with papermill: profiles, parameter checks, the cache
    cli          the `collapse` command (list, run, verdicts, book, publish, assignments, grade)
    scoreboard   verdict records collected, checked against expectations.yml, listed
    assignments  assignment notebooks and the student edition: solutions, checks, hidden checks
    grading      a class graded into a gradebook, each submission in a sandbox of its own
    sandbox      the confinement of a submission's kernel: its user, namespaces, limits
    checkhost    the grader's check process: checks run on plain data from the kernel
    wire         the plain data that crosses from a student's kernel, checked on arrival
    executors    where stale notebooks and sweep chunks run: here, or on a Dask cluster
    progress     long loops' progress lines, shown by `collapse run`, never kept in a notebook
    mathjax      the book's local MathJax copy, from the sphinx-mathjax-offline package
    pages        an executed notebook made a book page: verdicts at a glance, downloads
    figdata      each figure's data (CSV) written beside it and linked under it
    status       the build-status page: per chapter its profile, time, digest, verdicts
    launch       Colab and Binder buttons opening the published notebooks
    publish      the built site committed to a gh-pages branch (`collapse publish`)
    pdf          the whole book printed to one PDF through headless Chromium

The command needs the `book` extra (`pip install 'rank-collapse[book]'`: papermill, jupytext,
nbformat, ipykernel, PyYAML, Jupyter Book); `import collapse` imports none of them.
`collapse publish` alone needs none of them either: git and ghp-import are enough.
"""

from __future__ import annotations

import importlib.util
import os
import sys

__all__ = ["main", "BOOK_MODULES"]

# What the command imports; a library-only install has none of them.
BOOK_MODULES = ("yaml", "jupytext", "nbformat", "nbclient", "papermill", "ipykernel")

# nbformat imports jsonschema, which imports rfc3987-syntax where installed (the lock has it, for
# jupyter-events) only to check "iri" strings, which no notebook schema has, and that module
# builds its grammar on import: 1.7 s of CPU in each command and each grading worker, so it is
# marked absent here (jsonschema then leaves that one format unchecked).
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


def main(argv=None) -> int:
    """The `collapse` command, or one line naming the missing extra (exit status 2)."""
    from . import publish

    if publish.requested(argv):
        return publish.main(argv)
    missing = [name for name in BOOK_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"collapse: error: the command needs the book extra ({', '.join(missing)} missing): "
            "pip install 'rank-collapse[book]'",
            file=sys.stderr,
        )
        return 2
    from .cli import main as run

    try:
        return run(argv)
    except BrokenPipeError:
        # The reader closed the pipe (`collapse list | head`): stop without a traceback, with
        # stdout pointed at /dev/null so that the interpreter's last flush does not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
