"""The book's local MathJax: fetched once from the npm registry, kept small, the only MathJax a
page loads.

Offline-safe: nothing here downloads. The unpacking is tested on a small tarball made here;
the real copy is the one `make install` fetched into book/_static/mathjax.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from sphinx.errors import ConfigError

from collapse.book import mathjax
from collapse.checks import ParameterError

ROOT = Path(__file__).resolve().parents[1]
FETCH = "run `make install` or `python -m collapse.book.mathjax`"
KEPT = {
    "package/LICENSE": "LICENSE",
    "package/es5/tex-chtml.js": "tex-chtml.js",
    "package/es5/input/tex/extensions/boldsymbol.js": "input/tex/extensions/boldsymbol.js",
    "package/es5/output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff": (
        "output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff"
    ),
}
DROPPED = [
    "package/README.md",
    "package/es5/tex-svg.js",
    "package/es5/sre/mathmaps/en.json",
    "package/es5/input/tex/extensions/sub/x.js",
]


def make_tarball(path: Path, members) -> str:
    """An npm-style tarball holding `members` (each file's content is its name); returns
    its sha512 integrity.
    """
    with tarfile.open(path, "w:gz") as archive:
        for name in members:
            data = name.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def test_only_what_the_renderer_needs_is_kept(tmp_path):
    tarball = tmp_path / "mathjax.tgz"
    integrity = make_tarball(tarball, [*KEPT, *DROPPED])
    folder = tmp_path / "book" / "_static" / "mathjax"
    mathjax.install_from(tarball, folder, integrity)
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert files == {*KEPT.values(), "VERSION"}
    assert (folder / "tex-chtml.js").read_text() == "package/es5/tex-chtml.js"
    assert mathjax.is_installed(folder)
    assert [p.name for p in folder.parent.iterdir()] == [
        "mathjax"
    ]  # no partial folder left behind


def test_a_tarball_that_is_not_the_pinned_one_is_refused(tmp_path):
    tarball = tmp_path / "mathjax.tgz"
    make_tarball(tarball, KEPT)
    folder = tmp_path / "mathjax"
    folder.mkdir()
    (folder / "tex-chtml.js").write_text("the copy already there")
    with pytest.raises(mathjax.MathJaxError, match="expected the pinned"):
        mathjax.install_from(tarball, folder)  # the pinned integrity of the real release
    assert (folder / "tex-chtml.js").read_text() == "the copy already there"


def test_a_tarball_without_the_renderer_is_refused(tmp_path):
    tarball = tmp_path / "mathjax.tgz"
    integrity = make_tarball(tarball, ["package/LICENSE", "package/es5/tex-svg.js"])
    with pytest.raises(mathjax.MathJaxError, match="not a MathJax 3 release"):
        mathjax.install_from(tarball, tmp_path / "mathjax", integrity)
    assert list(tmp_path.iterdir()) == [tarball]


def test_fetching_needs_npm_only_when_the_copy_is_missing(tmp_path, monkeypatch, capsys):
    """`python -m collapse.book.mathjax` (its main, in this process: a subprocess would spend
    seconds importing torch).
    """
    monkeypatch.setenv("PATH", str(tmp_path / "no-npm-here"))
    assert mathjax.main(["--root", str(tmp_path)]) == 1
    expected = (
        "collapse.book.mathjax: error: npm not found: install Node.js and npm "
        f"to fetch mathjax@{mathjax.VERSION} from the npm registry"
    )
    assert capsys.readouterr().err.strip().splitlines() == [expected]
    tarball = tmp_path / "mathjax.tgz"
    mathjax.install_from(tarball, tmp_path / mathjax.FOLDER, make_tarball(tarball, KEPT))
    assert mathjax.main(["--root", str(tmp_path)]) == 0
    assert "already in" in capsys.readouterr().out


def test_the_fetched_copy_is_complete_and_small():
    folder = ROOT / mathjax.FOLDER
    assert mathjax.is_installed(folder), (
        f"no MathJax {mathjax.VERSION} in {folder}: run `make install`"
    )
    assert len(list((folder / "output/chtml/fonts/woff-v2").glob("*.woff"))) >= 20
    assert (folder / "input/tex/extensions/boldsymbol.js").is_file() and (
        folder / "LICENSE"
    ).is_file()
    assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) < 3e6


def test_collapse_book_asks_for_the_copy_in_one_line(tmp_path):
    with pytest.raises(
        ParameterError,
        match=rf"^MathJax 3\.\d+\.\d+ is missing from book/_static/mathjax: {re.escape(FETCH)}$",
    ):
        mathjax.require(tmp_path)
    assert mathjax.require(ROOT) == ROOT / mathjax.FOLDER


def _offline_book():
    """The book's own Sphinx extension, book/_ext/offline_book.py (not part of the package)."""
    spec = importlib.util.spec_from_file_location(
        "offline_book", ROOT / "book" / "_ext" / "offline_book.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_mathjax_from_another_host_is_refused(tmp_path):
    app = SimpleNamespace(
        builder=SimpleNamespace(format="html"),
        confdir=str(tmp_path),
        config=SimpleNamespace(
            mathjax_path="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js",
            html_static_path=["book/_static"],
        ),
    )
    with pytest.raises(ConfigError, match="must load MathJax from its own files"):
        _offline_book()._check_local_copy(app)


def test_a_build_without_the_copy_stops_with_one_line(tmp_path):
    """A one-page book with the project's _config.yml and extension but no book/_static: Sphinx
    stops before reading anything.
    """
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text())
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/page\n")
    shutil.copytree(
        ROOT / "book" / "_ext",
        tmp_path / "book" / "_ext",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (tmp_path / "book" / "page.md").write_text("# A page\n\nSome math: $x^2$.\n")
    (tmp_path / "book" / "references.bib").write_text(
        (ROOT / "book" / "references.bib").read_text()
    )
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    result = subprocess.run(
        [str(jupyter_book), "build", str(tmp_path), "-W", "-n", "--keep-going"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    output = re.sub(
        r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr
    )  # Sphinx colours its messages on some terminals
    assert (
        "Configuration error:\nMathJax is missing: "
        f"no mathjax/tex-chtml.js in the book's static files (book/_static): {FETCH}\n" in output
    )
    assert not (tmp_path / "_build" / "html" / "book" / "page.html").exists()


def test_the_built_book_loads_mathjax_only_from_its_own_files(fast_book):
    root, result = fast_book
    assert result.returncode == 0
    html = root / "_build" / "html"
    pages = [
        p
        for p in html.rglob("*.html")
        if p.relative_to(html).parts[0] not in ("_static", "_sources") and p.name != "index.html"
    ]
    assert pages
    for page in pages:
        text = page.read_text()
        # (a rel="canonical" link names the published address; a browser does not load it)
        remote = re.findall(
            r'<(?:script|link(?![^>]*rel="canonical")|img|iframe)\b[^>]*\b(?:src|href)='
            r'"((?:https?:)?//[^"]*)"',
            text,
        )
        assert not remote, f"{page.relative_to(html)} loads {remote}"
        assert re.search(
            r'<script defer="defer" src="(\.\./)*_static/mathjax/tex-chtml\.js\?v=\w+"></script>',
            text,
        ), page.relative_to(html)
    assert (html / "_static/mathjax/tex-chtml.js").read_bytes() == (
        ROOT / mathjax.FOLDER / "tex-chtml.js"
    ).read_bytes()
