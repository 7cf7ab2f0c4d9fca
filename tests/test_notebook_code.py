"""The chapters' code reads on a laptop screen: ruff clean, 99 columns, like the library."""

import subprocess
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.md"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_code_is_ruff_clean(path, tmp_path):
    """Each chapter's code cells, as a notebook, under the project's ruff settings."""
    notebook = tmp_path / f"{path.stem}.ipynb"
    jupytext.write(jupytext.read(path), notebook)
    ruff = Path(sys.executable).with_name("ruff")
    command = [str(ruff), "check", "--config", str(ROOT / "pyproject.toml"), str(notebook)]
    result = subprocess.run(
        [*command, "--output-format", "concise"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout.replace(str(tmp_path) + "/", "")
