"""`collapse publish` into a local bare repository: the site and .nojekyll on gh-pages."""

import subprocess
import sys

ROOT_FILES = {"notebooks/profiles.yml": "fast: {}\n", "_build/html/index.html": "<html>v1</html>"}


def _collapse(root, *args):
    return subprocess.run(
        [sys.executable, "-m", "collapse", "--root", str(root), *args],
        capture_output=True,
        text=True,
    )


def _tree(bare, branch="gh-pages"):
    listing = subprocess.run(
        ["git", "--git-dir", str(bare), "ls-tree", "-r", "--name-only", branch],
        capture_output=True,
        text=True,
        check=True,
    )
    return listing.stdout.split()


def test_publish_commits_the_site_with_nojekyll_and_keeps_history(tmp_path):
    root, bare = tmp_path / "project", tmp_path / "site.git"
    for name, text in ROOT_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "_build" / "html" / "_static").mkdir()
    (root / "_build" / "html" / "_static" / "book.css").write_text("body {}")
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)

    first = _collapse(root, "publish", "--remote", str(bare))
    assert first.returncode == 0, first.stderr
    assert sorted(_tree(bare)) == [".nojekyll", "_static/book.css", "index.html"]

    (root / "_build" / "html" / "index.html").write_text("<html>v2</html>")
    second = _collapse(root, "publish", "--remote", str(bare))
    assert second.returncode == 0, second.stderr
    log = subprocess.run(
        ["git", "--git-dir", str(bare), "log", "--format=%s", "gh-pages"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert len(log) == 2  # one commit per publish, on top of the last
    shown = subprocess.run(
        ["git", "--git-dir", str(bare), "show", "gh-pages:index.html"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown == "<html>v2</html>"


def test_publish_without_a_built_site_is_one_line_and_status_2(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "profiles.yml").write_text("fast: {}\n")
    result = _collapse(tmp_path, "publish", "--remote", str(tmp_path / "nowhere.git"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"collapse: error: no built book in {tmp_path / '_build' / 'html'}: "
        "run `collapse book` first"
    ]
