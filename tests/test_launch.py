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


def test_binder_gets_the_lock_and_the_library_at_its_commit(tmp_path):
    spec = launch.package_spec("https://github.com/org/repo", "0123abc")
    target = launch.write_binder(tmp_path, ROOT / "binder" / "requirements.txt", spec)
    lines = target.read_text().splitlines()
    lock = (ROOT / "requirements" / "lock.txt").read_text().splitlines()
    assert lines[1:] == [x for x in lock if x.strip() and not x.lstrip().startswith("#")]
    assert any(line.startswith("numpy==") for line in lines)
    assert not any(line.startswith("-r ") for line in lines)  # inlined: the site has no lock
    script = (target.parent / "postBuild").read_text()
    assert spec == "rank-collapse[pretrained] @ git+https://github.com/org/repo@0123abc"
    assert f"--no-deps '{spec}'" in script
    assert "--index-url https://download.pytorch.org/whl/cpu 'torch==2.13.0'" in script
    assert (target.parent / "postBuild").stat().st_mode & 0o111
    assert (target.parent / "runtime.txt").read_text() == "python-3.11\n"
    assert sorted(p.name for p in target.parent.iterdir()) == [
        "postBuild", "requirements.txt", "runtime.txt"]


def test_the_repositorys_binder_is_the_published_one_for_this_checkout():
    torch_pin = (ROOT / "requirements" / "torch.txt").read_text().split()[0]
    assert (ROOT / "binder" / "postBuild").read_text() == launch.postbuild(".", torch_pin)
    assert (ROOT / "binder" / "runtime.txt").read_text() == launch.RUNTIME
    assert "-r ../requirements/lock.txt" in (ROOT / "binder" / "requirements.txt").read_text()
