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


# Half of the hidden-cell code lines before the chapters' machinery moved to the library
# (4,877 non-blank lines outside the Verdicts sections, counted by tests/chapter_code.py on
# 3 December 2026).
HIDDEN_CODE_CEILING = 4877 // 2
LONGEST_FUNCTION = 12  # non-blank lines with its def line and docstring: "about ten"


def test_chapters_keep_their_machinery_in_the_library():
    """No helper defined in two chapters, no long chapter function, the code folded out of the
    reader's way at most half of what it was, and every verdict's code folded under it."""
    from chapter_code import stats

    counts = stats()
    assert not counts["shared_helpers"], counts["shared_helpers"]
    long = [f for f in counts["long_functions"] if f[2] > LONGEST_FUNCTION]
    assert not long, long
    assert counts["hidden_code_lines"] <= HIDDEN_CODE_CEILING, counts["hidden_code_lines"]
    assert not counts["unfolded_verdict_cells"], counts["unfolded_verdict_cells"]
