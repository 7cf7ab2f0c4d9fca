"""The licence and the citation file: present, and the citation's version is the package's."""

from pathlib import Path

import yaml

import collapse

ROOT = Path(__file__).resolve().parents[1]


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


def test_the_licence_covers_code_text_and_figures():
    text = (ROOT / "LICENSE").read_text()
    assert "MIT License" in text and "CC BY 4.0" in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'license = { text = "MIT" }' in pyproject
