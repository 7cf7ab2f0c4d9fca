"""Shared fixtures: seeded generators, and one fast-profile build of the whole book."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def copy_sources(target: Path) -> Path:
    """The book's sources (no executed outputs, no build) in a scratch project folder."""
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(ROOT / name, target / name)
    shutil.copytree(ROOT / "book", target / "book", ignore=shutil.ignore_patterns("executed"))
    shutil.copytree(ROOT / "notebooks", target / "notebooks")
    return target


@pytest.fixture(scope="session")
def fast_book(tmp_path_factory):
    """`collapse book --profile fast` on a copy of the sources: every notebook executed, then built."""
    root = copy_sources(tmp_path_factory.mktemp("project"))
    command = [sys.executable, "-m", "collapse", "--root", str(root), "book", "--profile", "fast"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    return root, result
