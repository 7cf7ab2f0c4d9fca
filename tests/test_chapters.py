"""Every chapter reads the same way and stands on its own: one shape, its model in plain code,
bookkeeping out of the reading flow, one paper reference, and nothing a reader cannot open."""

import re
import subprocess
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.md"))
EXPECTATIONS = yaml.safe_load((ROOT / "notebooks" / "expectations.yml").read_text()) or {}
SHAPE = ["Model", "Experiment", "Verdicts", "Why it differs", "Takeaways", "Exercises"]
# Internal notes, their codes and tags, and talk of how the project is made.
INTERNAL = re.compile(r"PAPERS|DESIGN\.md|\[[PCF]\]|pre-check|\bD[0-9]{1,2}\b|[Tt]he issue")


def sections(path: Path) -> dict[str, str]:
    """The text (markdown and code) under each `## ` heading of a chapter, in order."""
    found: dict[str, list[str]] = {}
    current = None
    for cell in jupytext.read(path).cells:
        for line in cell.source.splitlines():
            if cell.cell_type == "markdown" and line.startswith("## "):
                current = line[3:].strip()
                found[current] = []
            elif current is not None:
                found[current].append(line)
    return {name: "\n".join(lines) for name, lines in found.items()}


def header(path: Path) -> dict:
    return jupytext.read(path).metadata["collapse"]


def observed_outcomes(name: str) -> set[str]:
    """Every outcome expectations.yml records for a chapter, over verdicts and profiles."""
    entries = EXPECTATIONS.get(name, {}).values()
    return {v for entry in entries for k, v in entry.items() if k not in ("why", "short", "whose")}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_has_the_one_shape(path):
    expected = list(SHAPE)
    if observed_outcomes(path.stem) <= {"reproduced"}:
        expected.remove("Why it differs")
    assert list(sections(path)) == expected


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_model_is_plain_code_checked_against_the_library(path):
    model = sections(path)["Model"]
    assert "torch.testing.assert_close(" in model, "the Model section checks nothing"


# Timings and machine talk that belong in the "Run this chapter" dropdown.
BOOKKEEPING = re.compile(r"\bCPU cores?\b|\b\d+(\.\d+)? ?(s|seconds|minutes) on\b|\bETA\b")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_bookkeeping_sits_in_one_collapsed_dropdown(path):
    experiment = sections(path)["Experiment"].lstrip().splitlines()
    assert experiment[:2] == [":::{admonition} Run this chapter", ":class: dropdown"]
    in_dropdown = False
    for cell in jupytext.read(path).cells:
        text = cell.source
        if cell.cell_type == "code":
            if re.search(r"^(_ = )?(runtime\.)?use_threads\(", text, flags=re.MULTILINE):
                assert "hide-cell" in cell.metadata.get("tags", []), text[:200]
            continue
        in_dropdown = in_dropdown or "{admonition} Run this chapter" in text
        if in_dropdown:
            text = text.split("{admonition} Run this chapter")[-1].split("\n:::", 1)[-1]
            in_dropdown = False
        assert not BOOKKEEPING.search(text), BOOKKEEPING.search(text).group(0)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_verdict_lives_in_the_verdicts_section_and_says_its_kind(path):
    parts = sections(path)
    for name, text in parts.items():
        calls = text.count("report.check(")
        if name != "Verdicts":
            assert calls == 0, f"{calls} verdict call(s) under '## {name}'"
    assert "kind=" in parts["Verdicts"]


# A code of an internal brief (W1, M4, ...) at the start of a verdict key.
CODED_KEY = re.compile(r"^[wm][0-9]{1,2}-")


def test_verdict_keys_name_what_they_test_without_internal_codes():
    keys = [key for entries in EXPECTATIONS.values() for key in entries]
    assert keys and not [key for key in keys if CODED_KEY.match(key)]
    for path in CHAPTERS:
        called = re.findall(r'report\.check\(\s*f?"([^"]+)"', path.read_text())
        assert not [key for key in called if CODED_KEY.match(key)], path.name


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_one_paper_reference_per_chapter(path):
    source = path.read_text()
    refs = re.findall(r'^REF = "(.*)"$', source, flags=re.MULTILINE)
    assert refs in ([], [header(path)["paper_ref"]]), refs


def test_every_methods_link_reaches_a_section():
    methods = (ROOT / "book" / "methods.md").read_text()
    labels = set(re.findall(r"^\((methods-[a-z0-9-]+)\)=$", methods, flags=re.MULTILINE))
    used = set()
    for path in [*CHAPTERS, *(ROOT / "book").glob("*.md")]:
        used |= set(re.findall(r"\{ref\}`(methods-[a-z0-9-]+)`", path.read_text()))
    assert used and used <= labels, used - labels


def test_nothing_refers_to_files_outside_the_repository():
    tracked = subprocess.run(
        ["git", "ls-files", "notebooks", "book", "collapse", "README.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    hits = []
    for name in tracked:
        path = ROOT / name
        if path.suffix in {".md", ".py", ".yml", ".bib", ".txt"} and path.is_file():
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if INTERNAL.search(line):
                    hits.append(f"{name}:{number}: {line.strip()[:80]}")
    assert not hits, "\n".join(hits)
