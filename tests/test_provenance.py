"""One digest for executed notebooks and chunk folders: what it covers and what it ignores."""

import shutil
from pathlib import Path

import pytest

from collapse import provenance

LIBRARY = Path(provenance.__file__).resolve().parent


@pytest.fixture
def library(tmp_path, monkeypatch):
    """A copy of collapse/ that the digest reads instead of the installed one."""
    copy = tmp_path / "collapse"
    shutil.copytree(LIBRARY, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "LIBRARY", copy)
    return copy


def test_imports_are_read_from_code_not_run():
    source = "import torch\nfrom collapse import masks, san\nimport collapse.gap as g\n"
    source += "from collapse.fit import log_slope\nfrom collapse.book import runner\n"
    assert provenance.imported_modules(source) == {"masks", "san", "gap", "fit"}
    assert provenance.imported_modules("import collapse") == set(provenance.science_modules())
    inside = "from . import rng\nfrom .masks import make\nfrom .book.executors import X\n"
    assert provenance.imported_modules(inside, package=True) == {"rng", "masks"}
    assert provenance.imported_modules(inside) == set()


def test_dependencies_follow_imports_and_never_reach_the_tooling():
    assert {"san", "masks", "attention", "metrics", "rng"} <= set(provenance.dependencies(["san"]))
    assert "gap" not in provenance.dependencies(["masks"])
    assert "book" not in provenance.science_modules()
    assert provenance.dependencies(["not_a_module"]) == ()


def test_editing_the_tooling_changes_nothing(library):
    before = provenance.digest("notebook", b"source", ["san", "report"])
    for path in (library / "book").glob("*.py"):
        path.write_text(path.read_text() + "\n# an edit\n")
    assert provenance.digest("notebook", b"source", ["san", "report"]) == before


def test_editing_a_science_module_changes_what_depends_on_it(library):
    uses_masks = provenance.digest("notebook", b"source", ["san"])  # san imports masks
    no_masks = provenance.digest("notebook", b"source", ["markov"])
    masks = library / "masks.py"
    masks.write_text(masks.read_text() + "\n# an edit\n")
    assert provenance.digest("notebook", b"source", ["san"]) != uses_masks
    assert provenance.digest("notebook", b"source", ["markov"]) == no_masks


def test_inputs_kind_and_numeric_package_versions_count(monkeypatch):
    base = provenance.digest("notebook", b"source", ["fit"])
    assert provenance.digest("notebook", b"other", ["fit"]) != base
    assert provenance.digest("chunks", b"source", ["fit"]) != base
    assert {"torch", "numpy", "scipy", "pandas", "matplotlib"} <= set(provenance.NUMERIC_PACKAGES)
    for package in ("scipy", "matplotlib", "tokenizers"):
        real = provenance.package_version
        monkeypatch.setattr(
            provenance, "package_version", lambda n, p=package, v=real: v(n) + "x" * (n == p)
        )
        assert provenance.digest("notebook", b"source", ["fit"]) != base, package
        monkeypatch.setattr(provenance, "package_version", real)
    assert provenance.digest("notebook", b"source", ["fit"]) == base


def test_the_lock_file_counts(tmp_path, monkeypatch):
    lock = tmp_path / "lock.txt"
    monkeypatch.setattr(provenance, "LOCK", lock)
    absent = provenance.digest("notebook", b"source", ["fit"])
    lock.write_text("numpy==2.0.0 --hash=sha256:aa\n")
    locked = provenance.digest("notebook", b"source", ["fit"])
    lock.write_text("numpy==2.0.1 --hash=sha256:bb\n")
    assert len({absent, locked, provenance.digest("notebook", b"source", ["fit"])}) == 3
