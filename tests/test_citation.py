"""The licence and the citation file: present, valid Citation File Format, and the
citation's version is the package's."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import collapse

ROOT = Path(__file__).resolve().parents[1]
# cffconvert 2.0.0 pins jsonschema<4, which Jupyter Book cannot use: `make install` gives it
# an environment of its own inside the project's.
CFFCONVERT = [
    prefix / "cffconvert" / "bin" / "cffconvert" for prefix in (ROOT / ".venv", Path(sys.prefix))
]


def _cffconvert() -> Path:
    """The project's cffconvert, or a loud skip (a failure under CI, where `make test` builds
    it)."""
    for path in CFFCONVERT:
        if path.is_file():
            return path
    where = " or ".join(str(path) for path in CFFCONVERT)
    message = f"CITATION.cff NOT VALIDATED: no cffconvert in {where} (`make install` builds it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_cffconvert(), "--validate", "-i", path], capture_output=True, text=True
    )


def test_the_citation_names_this_version_and_both_papers():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["version"] == collapse.__version__
    assert cff["license"] == "MIT" and cff["authors"]
    titles = [r["title"] for r in cff["references"]]
    assert titles[0] == "On the Role of Attention Masks and LayerNorm in Transformers"
    assert titles[1].startswith("Mind the Gap: a Spectral Analysis of Rank Collapse")
    for reference in cff["references"]:
        assert reference["authors"] and reference["year"] in (2024, 2025)


def test_the_citation_is_valid_citation_file_format(tmp_path):
    result = _validate(ROOT / "CITATION.cff")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid according to schema version 1.2.0" in result.stdout

    broken = tmp_path / "CITATION.cff"
    text = (ROOT / "CITATION.cff").read_text()
    broken.write_text(re.sub(r"(?m)^date-released: .*$", "date-released: soon", text))
    result = _validate(broken)
    assert result.returncode != 0 and "date-released" in result.stdout + result.stderr


def test_the_licence_covers_code_text_and_figures():
    text = (ROOT / "LICENSE").read_text()
    assert "MIT License" in text and "CC BY 4.0" in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'license = { text = "MIT" }' in pyproject
