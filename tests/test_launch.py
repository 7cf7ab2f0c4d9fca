"""Launch settings from one repository URL; the published tree's Binder requirements."""

import subprocess
import sys

import pytest

from collapse.book import launch
from collapse.checks import ParameterError

ROOT = launch.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/org/repo",
        "https://github.com/org/repo.git",
        "https://github.com/org/repo/",
    ],
)
def test_a_github_url_gives_the_theme_its_repository_branch_and_path(url):
    config = launch.settings(url)
    assert config["repository"] == {
        "url": "https://github.com/org/repo",
        "branch": "gh-pages",
        "path_to_book": "_sources",
    }
    assert config["launch_buttons"]["colab_url"] == launch.COLAB
    assert config["launch_buttons"]["binderhub_url"] == launch.BINDERHUB
    assert config["html"]["baseurl"] == "https://org.github.io/repo/"
    assert launch.settings(url, baseurl="https://book.example/")["html"]["baseurl"] == (
        "https://book.example/"
    )


@pytest.mark.parametrize(
    "url", ["github.com/org/repo", "https://gitlab.com/org/repo", "https://github.com/org"]
)
def test_anything_but_a_github_repository_is_refused_in_one_line(url):
    with pytest.raises(ParameterError, match="--repository .*https://github.com/OWNER/REPO"):
        launch.settings(url)


def test_the_cli_refuses_a_bad_repository_before_running_anything(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "collapse", "--root", str(ROOT), "book", "--repository", "x"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "collapse: error: --repository 'x': a GitHub repository URL is needed, "
        "https://github.com/OWNER/REPO (Colab opens notebooks from GitHub)"
    ]


def test_binder_gets_the_repository_requirements_and_the_library_at_its_commit(tmp_path):
    spec = launch.package_spec("https://github.com/org/repo", "0123abc")
    target = launch.write_binder(tmp_path, ROOT / "binder" / "requirements.txt", spec)
    lines = target.read_text().splitlines()
    assert lines[-1] == "collapse[pretrained] @ git+https://github.com/org/repo@0123abc"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert "torch==2.13.0+cpu" in lines
    assert not any(line.startswith("#") for line in lines[1:])
    assert sorted(p.name for p in target.parent.iterdir()) == ["requirements.txt"]
