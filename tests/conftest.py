"""Shared fixtures: seeded generators, and one fast-profile build of the whole book."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# `make test` runs three processes on two cores (two workers and the fast book's build): each
# single-threaded, so that no OpenMP or BLAS pool spins waiting for a core another one holds
# (their subprocesses and kernels inherit it). A test of threading sets its own count.
for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")

import torch  # noqa: E402 (after the thread settings, which it reads when imported)

ROOT = Path(__file__).resolve().parents[1]


# Tests that use these fixtures are in the slow tiers (`make check` leaves them out): the first
# set reads a built book, the second starts kernels, a Dask cluster or a Jupyter server.
BOOK_FIXTURES = {"fast_book", "site", "browsed", "printed", "student"}
EXECUTION_FIXTURES = {"toy", "chapter_class", "lab", "dask", "small_book"}


# Modules that take minutes, started first within their tier, longest first: the two workers
# of `make test` then finish about together. (`--no-loadscope-reorder` keeps this order;
# pytest-xdist would otherwise start the modules with the most tests first.)
LONGEST_FIRST = (
    "test_grading", "test_runner", "test_assignments",  # need no book
    "test_pdf", "test_browser", "test_student_edition",  # read the fast book
)  # fmt: skip


def pytest_collection_modifyitems(items):
    """Mark the slow tiers; then order the tests for `make test`'s two workers (-n 2 --dist
    loadscope: a module runs on one worker): the modules that read the fast book last, so
    that both workers run the rest while the controller builds it (`pytest_configure`), and
    within each tier the LONGEST_FIRST."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & BOOK_FIXTURES:
            item.add_marker(pytest.mark.book)
        if used & EXECUTION_FIXTURES:
            item.add_marker(pytest.mark.execution)

    def module(item):
        return Path(str(item.path)).stem

    reading = {module(item) for item in items if item.get_closest_marker("book")}
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: (module(item) in reading, rank.get(module(item), len(rank))))


@pytest.fixture(autouse=True)
def _no_ipython_shell_left():
    """A test that glues a value (myst_nb starts an IPython shell) leaves no shell behind: the
    library would take the next test for a notebook and display rather than print."""
    yield
    shell = sys.modules.get("IPython.core.interactiveshell")
    if shell is not None and shell.InteractiveShell.initialized():
        shell.InteractiveShell.clear_instance()


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def copy_sources(target: Path) -> Path:
    """The book's sources (no executed outputs, no build) in a scratch project folder."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(ROOT / name, target / name)
    shutil.copytree(ROOT / "book", target / "book", ignore=shutil.ignore_patterns("executed"))
    shutil.copytree(ROOT / "notebooks", target / "notebooks")
    shutil.copytree(ROOT / "binder", target / "binder")
    # the lock and torch's pin: the published binder/ inlines them (collapse.book.launch)
    shutil.copytree(ROOT / "requirements", target / "requirements",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return target


def without_network(command: list[str]) -> list[str]:
    """`command` in a fresh network namespace with only loopback (kernels talk over 127.0.0.1),
    where the machine allows one: then nothing in it can download. Unchanged where `unshare -n`
    is not permitted.
    """
    if (
        not (shutil.which("unshare") and shutil.which("ip"))
        or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode
    ):
        return command
    return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command]


def run_collapse(*args, timeout=300, offline=False):
    """The `collapse` command in a subprocess; `offline`: without network where the machine
    allows (`without_network`)."""
    command = [sys.executable, "-m", "collapse", *map(str, args)]
    return subprocess.run(
        without_network(command) if offline else command,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tagged(nb, tag):
    """The cells of `nb` with tag `tag`."""
    return [c for c in nb.cells if tag in c.metadata.get("tags", [])]


# A toy chapter's opening, for the grading tests: MyST header, title, parameters cell (n = 100).
TOY_OPENING = """\
---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---

# Toy

```{code-cell} ipython3
:tags: [parameters]

n = 100
```
"""


def toy_project(root: Path, chapter: str) -> tuple[Path, Path]:
    """A project in `root` with one chapter, 01-toy (fast profile: n = 10), and its assignment
    made by `collapse assignments`: (root, the assignment notebook)."""
    (root / "notebooks").mkdir()
    (root / "notebooks" / "profiles.yml").write_text("fast:\n  01-toy: {n: 10}\n")
    (root / "notebooks" / "01-toy.md").write_text(chapter)
    result = run_collapse("--root", root, "assignments", "01", "--out", root / "out")
    assert result.returncode == 0, result.stderr
    return root, root / "out" / "01-toy.ipynb"


# The fast book is built as if published from this (made-up) public repository, so that its
# pages carry Colab and Binder launch buttons.
REPOSITORY = "https://github.com/example-org/rank-collapse"


def fast_book_command(root: Path) -> list[str]:
    """`collapse book` in the fast profile with launch buttons, as the fixture builds it."""
    return [
        *(sys.executable, "-m", "collapse", "--root", str(root), "book", "--profile", "fast"),
        *("--repository", REPOSITORY),
    ]


def build_fast_book(shared: Path) -> dict:
    """Build the fast book once under `shared`/fast-book (a lock: whoever asks first builds,
    the others wait) and return the build's outcome (args, returncode, stdout, stderr)."""
    from filelock import FileLock

    folder = shared / "fast-book"
    with FileLock(f"{folder}.lock"):
        done = folder / "result.json"
        if not done.is_file():
            root = copy_sources(Path(folder / "project"))
            command = without_network(fast_book_command(root))
            run = subprocess.run(command, capture_output=True, text=True, timeout=1800)
            kept = {k: getattr(run, k) for k in ("args", "returncode", "stdout", "stderr")}
            done.write_text(json.dumps(kept))
        return json.loads(done.read_text())


def _shared_temp(tmp_path_factory) -> Path:
    """The run's own temporary folder: a pytest-xdist worker's basetemp is inside it."""
    shared = tmp_path_factory.getbasetemp()
    return shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared


@pytest.hookimpl(trylast=True)  # after pytest's own, which makes the temporary folders
def pytest_configure(config):
    """Under pytest-xdist, the controller of a whole-suite run (`make test`) starts the fast
    book's build at once, in the background (`python tests/conftest.py SHARED`), while both
    workers run the tests that do not read it (ordered first): no worker waits idle for the
    book. Not for a run of chosen files, one that deselects the book tier (`make check`) or
    one that checks an existing build (COLLAPSE_BOOK_ROOT)."""
    is_controller = not hasattr(config, "workerinput") and config.getoption("numprocesses", None)
    whole_suite = all(Path(arg).resolve() == ROOT / "tests" for arg in config.args)
    skips_book = "not book" in (config.getoption("markexpr", "") or "")
    if is_controller and whole_suite and not skips_book and not os.environ.get(
        "COLLAPSE_BOOK_ROOT"
    ):
        shared = config._tmp_path_factory.getbasetemp()
        config._fast_book_build = subprocess.Popen(
            [sys.executable, __file__, str(shared)],
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # its kernels too are stopped with it (pytest_unconfigure)
        )


def pytest_unconfigure(config):
    build = getattr(config, "_fast_book_build", None)
    if build is not None and build.poll() is None:  # an interrupted run: stop building
        os.killpg(build.pid, signal.SIGTERM)
        build.wait()


@pytest.fixture(scope="session")
def fast_book(tmp_path_factory):
    """`collapse book --profile fast` on a copy of the sources, offline where possible: every
    notebook executed, then built. Under pytest-xdist the controller has started the build
    (`pytest_configure`); a worker that asks waits for it (or builds it, if it asks first).
    """
    kept = build_fast_book(_shared_temp(tmp_path_factory))
    return _shared_temp(tmp_path_factory) / "fast-book" / "project", subprocess.CompletedProcess(
        **kept
    )


def built_book_root(request) -> Path:
    """The project whose built book a test reads: COLLAPSE_BOOK_ROOT (a folder with _build/html
    and book/executed, to check an existing build in seconds) or else the fast book."""
    built = os.environ.get("COLLAPSE_BOOK_ROOT")
    if built:
        return Path(built).resolve()
    root, result = request.getfixturevalue("fast_book")
    assert result.returncode == 0, "the book did not build: see test_book.py"
    return root


if __name__ == "__main__":  # the controller's background build (pytest_configure)
    build_fast_book(Path(sys.argv[1]))
