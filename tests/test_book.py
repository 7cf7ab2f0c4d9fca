"""The book builds cleanly (-W -n: any warning fails) and a broken page fails the build."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")


def build(source: Path, output: Path) -> subprocess.CompletedProcess:
    command = [str(JUPYTER_BOOK), "build", str(source), "--path-output", str(output), "-W", "-n", "--keep-going", "--all"]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    output = tmp_path_factory.mktemp("book")
    result = build(ROOT, output)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return output / "_build" / "html"


def test_pages_exist_and_cite_both_papers(built):
    intro = (built / "book" / "intro.html").read_text()
    assert "Wu <em>et al.</em>, 2024" in intro and "Nait Saada" in intro
    assert "arXiv:2405.18781" in intro and "arXiv:2410.07799" in intro
    assert (built / "book" / "reproduce.html").exists() and (built / "index.html").exists()


def test_definitions_render_as_proof_blocks(built):
    intro = (built / "book" / "intro.html").read_text()
    assert intro.count('class="proof definition admonition"') == 3


def test_a_broken_reference_fails_the_build(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "book", source / "book", ignore=shutil.ignore_patterns("executed"))
    with open(source / "book" / "reproduce.md", "a") as page:
        page.write("\nSee {ref}`no-such-label`.\n")
    result = build(source, tmp_path / "out")
    assert result.returncode != 0
    assert "no-such-label" in result.stdout + result.stderr
