"""The student edition: built from the cached fast-profile notebooks, every exercise kept, no
solution text left.

"Solution text" is every line of rendered text inside a sphinx-exercise solution block of
the full build (prose, code and outputs, gated or not) that appears nowhere else in the
full build. None may appear in the student edition's pages, page sources or downloads.
"""

import json
import re
import subprocess
import sys

import pytest
import yaml
from bs4 import BeautifulSoup
from conftest import without_network


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def pages(html_root):
    return {
        p.relative_to(html_root): BeautifulSoup(p.read_text(), "html.parser")
        for p in sorted(html_root.rglob("*.html"))
    }


@pytest.fixture(scope="module")
def student(fast_book):
    """`collapse book --profile fast --student` (offline where possible) on the fast book's
    project: (root, full pages, student pages, its output).
    """
    root, built = fast_book
    assert built.returncode == 0, (
        "the full fast build failed (test_book reports why): " + built.stderr[-2000:]
    )
    full = pages(
        root / "_build" / "html"
    )  # read first: the student build must not touch the full one
    command = without_network(
        [
            sys.executable,
            "-m",
            "collapse",
            "--root",
            str(root),
            "book",
            "--profile",
            "fast",
            "--student",
        ]
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return root, full, pages(root / "_build" / "student" / "html"), result


def solution_lines(full: dict) -> set:
    """Lines (20+ characters) found inside solution blocks of the full build and nowhere else in
    it.

    Text is taken without a separator between elements: highlighted code is one span per
    token, and a separator would split a code line into fragments (or pad it with spaces).
    """
    inside, outside = set(), []
    for soup in full.values():
        soup = BeautifulSoup(str(soup), "html.parser")  # a copy: the blocks are cut out below
        blocks = soup.select("div.solution")
        inside |= {
            squash(line)
            for block in blocks
            for line in block.get_text().splitlines()
            if len(squash(line)) >= 20
        }
        for block in blocks:
            block.decompose()
        outside.append(squash(soup.get_text()))
    rest = "\n".join(outside)
    return {line for line in inside if line not in rest}


def student_corpus(root, student: dict) -> str:
    """Everything a student can read: the pages' text and the raw text of every
    source and download.
    """
    texts = [squash(soup.get_text()) for soup in student.values()]
    for path in (root / "_build" / "student" / "html").rglob("*"):
        if path.suffix == ".ipynb":
            texts.append(
                squash(
                    "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
                )
            )
            texts.append(path.read_text())  # and its raw JSON: metadata can hold sources too
        elif path.suffix in (".md", ".txt", ".py"):
            texts.append(squash(path.read_text(errors="replace")))
    return "\n".join(texts)


def test_the_student_build_has_no_solution_text(student):
    root, full, pages_, _ = student
    lines = solution_lines(full)
    assert len(lines) > 200, "the full build should hold the solutions of every notebook"
    assert any(
        "farthest = n - 1 if causal else n // 2" in line for line in lines
    )  # a gated solution's code is in the full book
    corpus = student_corpus(root, pages_)
    leaked = sorted(line for line in lines if line in corpus)
    assert not leaked, f"{len(leaked)} solution lines in the student edition, e.g. {leaked[:3]}"


def test_every_exercise_is_kept_and_every_solution_hidden(student):
    _, full, pages_, _ = student
    counted = 0
    for name, soup in full.items():
        exercises = len(soup.select("div.exercise"))
        counted += exercises
        assert name in pages_, f"{name} is missing from the student edition"
        assert len(pages_[name].select("div.exercise")) == exercises, name
        assert not pages_[name].select("div.solution"), name
    assert counted >= 2 * 11


def test_the_student_edition_is_its_own_output(student):
    root, full, _, result = student
    assert (
        f"student edition: {root / '_build' / 'student' / 'html' / 'index.html'}" in result.stdout
    )
    assert "cached" in result.stdout  # the executed notebooks were reused
    assert (root / "_build" / "html" / "index.html").is_file()
    assert pages(root / "_build" / "html").keys() == full.keys()
    config = yaml.safe_load((root / "_build" / "student" / "source" / "_config.yml").read_text())
    assert config["sphinx"]["config"]["hide_solutions"] is True
    assert config["title"].endswith("(student edition)")


def test_no_hidden_check_reaches_the_student_edition(student):
    """Every line of every hidden check (beyond a bare keyword) is in the full book's notebooks
    and nowhere in the student edition's pages, sources or downloads."""
    import jupytext

    root, _, pages_, _ = student
    corpus = student_corpus(root, pages_)
    cells = [
        c
        for p in sorted((root / "notebooks").glob("[0-9][0-9]-*.md"))
        for c in jupytext.read(p).cells
    ]
    hidden = ["hidden-check" in c.metadata.get("tags", []) for c in cells]
    # lines that are hidden-check text only, not text the chapters also show
    elsewhere = squash("\n".join(c.source for c, h in zip(cells, hidden, strict=True) if not h))
    lines = {
        squash(line)
        for cell, h in zip(cells, hidden, strict=True)
        if h
        for line in cell.source.splitlines()
        if len(squash(line)) > 12 and squash(line) not in elsewhere
    }
    assert len(lines) >= 16, "every chapter's graded exercise should have a hidden check"
    leaked = sorted(line for line in lines if line in corpus)
    assert not leaked, f"{len(leaked)} hidden-check lines in the student edition: {leaked[:3]}"
