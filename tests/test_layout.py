"""The science library apart from the book tooling: a light import, and a command that says
what it needs."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

import collapse.book
from collapse import provenance, rng, runtime

ROOT = Path(__file__).resolve().parents[1]
TOOLING = ("papermill", "jupytext", "nbformat", "nbclient", "ipykernel", "yaml")


def test_importing_the_science_imports_no_book_tooling():
    modules = ", ".join(f"collapse.{m}" for m in provenance.science_modules())
    code = f"import sys, collapse, {modules}; print(sorted(set({TOOLING!r}) & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_library_install_needs_no_book_tooling():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].lower() for d in project["dependencies"]}
    assert not names & {"papermill", "jupytext", "nbformat", "nbclient", "ipykernel", "pyyaml"}
    book = " ".join(project["optional-dependencies"]["book"])
    assert all(name in book for name in ("papermill", "jupytext", "ipykernel", "pyyaml"))
    assert project["scripts"]["collapse"] == "collapse.book:main"


def test_the_command_names_the_missing_extra(monkeypatch, capsys):
    real = collapse.book.importlib.util.find_spec
    monkeypatch.setattr(
        collapse.book.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "papermill" else real(name, *a),
    )
    assert collapse.book.main(["list"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "collapse: error: the command needs the book extra (papermill missing): "
        "pip install 'rank-collapse[book]'"
    )


def test_a_seed_alone_is_torchs_own_and_streams_are_independent():
    assert torch.equal(
        torch.randn(5, generator=rng.generator(3)),
        torch.randn(5, generator=torch.Generator().manual_seed(3)),
    )
    a, b = (torch.randn(5, generator=rng.generator(3, s)) for s in (0, 1))
    assert not torch.equal(a, b)
    assert torch.equal(a, torch.randn(5, generator=rng.generator(3, 0)))
    assert rng.check_seeds(4) == [4] and rng.check_seeds(range(3)) == [0, 1, 2]
    with pytest.raises(collapse.ParameterError, match="non-empty"):
        rng.check_seeds([])
    with pytest.raises(collapse.ParameterError, match="seed must be an int >= 0"):
        rng.generator(-1)


def test_seed_families_are_disjoint_and_family_zero_is_the_books(monkeypatch):
    monkeypatch.delenv(rng.FAMILY_ENV, raising=False)
    assert rng.seeds(3) == [0, 1, 2] and rng.seed(7) == 7
    monkeypatch.setenv(rng.FAMILY_ENV, "2")
    assert rng.seeds(2, start=5) == [2_000_005, 2_000_006]
    assert not set(rng.seeds(1000)) & {s + rng.FAMILY_SIZE for s in range(1000)}
    with pytest.raises(collapse.ParameterError, match="one family's seeds"):
        rng.seed(rng.FAMILY_SIZE)
    monkeypatch.setenv(rng.FAMILY_ENV, "two")
    with pytest.raises(collapse.ParameterError, match="COLLAPSE_SEED_FAMILY must be an int"):
        rng.seeds(1)


def test_use_threads_as_a_call_and_as_a_block():
    before = torch.get_num_threads()
    other = 1 if before > 1 else 2
    with runtime.use_threads(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before
    held = runtime.use_threads(other)
    assert torch.get_num_threads() == other
    held.restore()
    assert torch.get_num_threads() == before


def test_the_install_is_what_the_readme_and_the_lock_say():
    """One distribution name, the Python claimed, every extra in the lock and in conda's file,
    every pin of the lock hashed, and torch out of it (pinned by version alone)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "rank-collapse"
    assert project["requires-python"] == ">=3.11"
    lock = (ROOT / "requirements" / "lock.txt").read_text()
    pins = dict(
        line.split(" ")[0].split("==")
        for line in lock.splitlines()
        if line and not line[0].isspace() and not line.startswith("#")
    )
    assert "torch" not in pins and "nvidia-cudnn-cu12" not in pins
    assert lock.count("--hash=sha256:") >= len(pins) > 100
    extras = installer_extras()
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    names = {re.split(r"[<>=\[ ;]", d)[0].lower() for d in wanted} - {"torch"}
    assert names <= {name.lower() for name in pins}, names - set(pins)
    assert f"-e .[{','.join(extras)}]" in (ROOT / "environment.yml").read_text()
    make_lock = (ROOT / "Makefile").read_text().split("\nlock:")[1].split("\n\n")[0]
    assert sorted(re.findall(r"--extra (\w+)", make_lock)) == sorted(extras)
    assert (ROOT / "requirements" / "torch.txt").read_text().split() == ["torch==2.13.0"]


def installer_extras() -> list[str]:
    """The extras requirements/install.py installs (and the lock was resolved for)."""
    source = (ROOT / "requirements" / "install.py").read_text()
    return re.search(r'^EXTRAS = "([^"]+)"', source, re.M).group(1).split(",")


def test_nothing_in_the_install_needs_npm():
    """MathJax comes from PyPI (collapse.book.mathjax): neither command may call npm."""
    for path in ("Makefile", "requirements/install.py"):
        assert "npm" not in (ROOT / path).read_text(), path
    mathjax = (ROOT / "collapse" / "book" / "mathjax.py").read_text()
    assert '"npm"' not in mathjax and "npm pack" not in mathjax
