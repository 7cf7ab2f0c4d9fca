"""`collapse publish` into a local bare repository: the site and .nojekyll as the one commit
of gh-pages, bad remotes refused or explained in one line, and no book extra needed."""

import subprocess
import sys

import pytest

from collapse.book import publish
from collapse.checks import ParameterError

# What `pip install --no-deps rank-collapse ghp-import` lacks: the command may import none.
HEAVY = (
    "torch", "numpy", "pandas", "scipy", "matplotlib", "yaml",
    "jupytext", "papermill", "nbformat", "nbclient", "ipykernel",
)  # fmt: skip


def _project(tmp_path):
    """A checkout of its own (git, one commit) with a tiny built site."""
    root = tmp_path / "project"
    files = {
        "notebooks/profiles.yml": "fast: {}\n",
        "_build/html/index.html": "<html>v1</html>",
        "_build/html/_static/book.css": "body {}",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    identity = ["-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "notebooks"], check=True)
    subprocess.run(["git", "-C", str(root), *identity, "commit", "-qm", "x"], check=True)
    return root


def _bare(tmp_path):
    bare = tmp_path / "site.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    return bare


def _collapse(root, *args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "collapse", "--root", str(root), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def _git(repo, *args):
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_each_publish_leaves_one_commit_with_the_site_and_nojekyll(tmp_path):
    root, bare = _project(tmp_path), _bare(tmp_path)
    refs = _git(root, "for-each-ref")
    commits = []
    for version in ("v1", "v2"):
        (root / "_build" / "html" / "index.html").write_text(f"<html>{version}</html>")
        # A relative remote is read from the current folder, as git would.
        result = _collapse(root, "publish", "--remote", "site.git", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        commits.append(_git(bare, "rev-parse", "gh-pages"))
        site = root / "_build" / "html"
        assert result.stdout == f"published {site} as gh-pages {commits[-1][:12]}\n"
        assert _git(bare, "rev-list", "--count", "gh-pages") == "1"
        tree = _git(bare, "ls-tree", "-r", "--name-only", "gh-pages").split()
        assert sorted(tree) == [".nojekyll", "_static/book.css", "index.html"]
        assert _git(bare, "show", "gh-pages:index.html") == f"<html>{version}</html>"
    assert commits[0] != commits[1]
    assert _git(root, "for-each-ref") == refs  # the user's checkout gained no branch


def test_the_function_returns_the_pushed_commit(tmp_path):
    root, bare = _project(tmp_path), _bare(tmp_path)
    commit = publish.publish(root, str(bare), branch="site")
    assert commit == _git(bare, "rev-parse", "site")


@pytest.mark.parametrize("option", ["--upload-pack", "--receive-pack"])
def test_a_remote_beginning_with_a_dash_is_refused_before_git_runs(tmp_path, option):
    root, planted = _project(tmp_path), tmp_path / "planted"
    result = _collapse(root, "publish", f"--remote={option}=touch {planted}")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"collapse: error: --remote must be a git URL or path not beginning with '-', "
        f"got '{option}=touch {planted}'"
    ]
    assert not planted.exists()


def test_a_branch_beginning_with_a_dash_or_not_a_branch_name_is_refused(tmp_path):
    root, bare = _project(tmp_path), _bare(tmp_path)
    for branch in ("-f", "a..b"):
        with pytest.raises(ParameterError, match="^--branch must be a git branch name"):
            publish.publish(root, str(bare), branch)


def test_an_option_publish_does_not_take_is_one_line(tmp_path):
    result = _collapse(_project(tmp_path), "publish", "--force")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "collapse: error: unrecognized option --force (see collapse publish --help)"
    ]


def test_a_missing_remote_is_one_whole_line_from_git(tmp_path):
    root, missing = _project(tmp_path), tmp_path / "nowhere.git"
    result = _collapse(root, "publish", "--remote", str(missing))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"collapse: error: cannot push to {missing}: '{missing}' does not ")
    assert line.endswith("Could not read from remote repository.")


def test_a_token_in_the_remote_is_never_shown(tmp_path):
    root = _project(tmp_path)
    url = "https://x-access-token:s3cret@127.0.0.1:9/site.git"  # nothing listens on port 9
    with pytest.raises(ParameterError, match=r"^cannot push to https://\*\*\*@127") as told:
        publish.publish(root, url)
    assert "s3cret" not in str(told.value)


def test_publish_without_a_built_site_is_one_line_and_status_2(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "profiles.yml").write_text("fast: {}\n")
    result = _collapse(tmp_path, "publish", "--remote", str(tmp_path / "nowhere.git"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"collapse: error: no built book in {tmp_path / '_build' / 'html'}: "
        "run `collapse book` first"
    ]


def test_publish_needs_neither_the_book_extra_nor_the_science(tmp_path):
    """The command as `pip install --no-deps` leaves it: every heavy import fails, and the
    publish still goes through (counted by module, not by the clock)."""
    root, bare = _project(tmp_path), _bare(tmp_path)
    script = (
        "import sys\n"
        "class Absent:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.partition('.')[0] in {HEAVY!r}:\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Absent())\n"
        "from collapse.book import main\n"
        f"sys.exit(main(['--root', {str(root)!r}, 'publish', '--remote', {str(bare)!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("published ")
    assert _git(bare, "rev-list", "--count", "gh-pages") == "1"
