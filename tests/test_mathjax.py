"""The book's local MathJax: copied from the PyPI package sphinx-mathjax-offline, kept small,
checked against pinned digests, the only MathJax a page loads.

Offline-safe: nothing here downloads. The copy is made from the installed package (the `book`
extra) into tmp_path, and refused from a package copied here and then changed; the project's
own copy is the one `make install` made in book/_static/mathjax.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from sphinx.errors import ConfigError

from collapse.book import mathjax
from collapse.checks import ParameterError

ROOT = Path(__file__).resolve().parents[1]
FETCH = "run `make install` or `python -m collapse.book.mathjax`"
PACKAGE = importlib.metadata.distribution("sphinx-mathjax-offline")
SOURCE = Path(PACKAGE.locate_file("sphinx-mathjax-offline/static/mathjax"))
FOLDERS = ("input/tex/extensions", "output/chtml/fonts/woff-v2")


def renderer_files() -> dict[str, Path]:
    """What the TeX-to-HTML renderer loads, by path inside the copy, and the package's file."""
    files = {"tex-chtml.js": SOURCE / "tex-chtml.js"}
    for top in FOLDERS:
        files.update({f"{top}/{p.name}": p for p in (SOURCE / top).iterdir() if p.is_file()})
    return files


def files_in(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def fake_package(site: Path, relative: str | None = None, *, record: bool = False):
    """A copy of the installed package's renderer files and metadata under `site`, with one
    byte of `relative` changed (and its RECORD line made to match when `record`).
    """
    info = Path(PACKAGE.locate_file(f"sphinx_mathjax_offline-{PACKAGE.version}.dist-info"))
    shutil.copytree(info, site / info.name)
    mathjax_folder = site / "sphinx-mathjax-offline" / "static" / "mathjax"
    for name, path in renderer_files().items():
        (mathjax_folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, mathjax_folder / name)
    if relative is not None:
        changed = mathjax_folder / relative
        data = bytearray(changed.read_bytes())
        data[len(data) // 2] ^= 1
        changed.write_bytes(bytes(data))
        if record:
            fake = importlib.metadata.Distribution.at(site / info.name)
            entry = next(e for e in fake.files if e.as_posix().endswith("/mathjax/" + relative))
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            lines = (site / info.name / "RECORD").read_text()
            (site / info.name / "RECORD").write_text(
                lines.replace(entry.hash.value, digest.decode())
            )
    return importlib.metadata.Distribution.at(site / info.name)


def test_only_what_the_renderer_needs_is_kept(tmp_path):
    folder = mathjax.fetch(tmp_path)
    assert files_in(folder) == {*renderer_files(), "LICENSE", "VERSION"}
    assert "input/tex/extensions/boldsymbol.js" in renderer_files()
    assert len(list((folder / "output/chtml/fonts/woff-v2").glob("*.woff"))) >= 20
    assert (SOURCE / "tex-svg.js").is_file() and (SOURCE / "sre").is_dir()  # left behind
    assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) < 3e6
    assert mathjax.is_installed(folder)
    assert [p.name for p in folder.parent.iterdir()] == ["mathjax"]  # no partial folder left
    notice = (folder / "LICENSE").read_text()
    assert "MathJax 3.2.2" in notice and "Apache License, Version 2.0" in notice
    assert f"sphinx-mathjax-offline {PACKAGE.version}" in notice


def test_the_copy_is_the_package_files_unchanged(tmp_path):
    folder = mathjax.fetch(tmp_path)
    for name, path in renderer_files().items():
        assert (folder / name).read_bytes() == path.read_bytes(), name


def test_a_file_changed_in_the_package_is_refused_by_name(tmp_path):
    package = fake_package(tmp_path / "site", "input/tex/extensions/boldsymbol.js")
    folder = tmp_path / "mathjax"
    folder.mkdir()
    (folder / "tex-chtml.js").write_text("the copy already there")
    changed = tmp_path / "site/sphinx-mathjax-offline/static/mathjax/input/tex/extensions"
    with pytest.raises(mathjax.MathJaxError) as raised:
        mathjax.install_from(package, folder)
    assert str(raised.value).startswith(f"{changed / 'boldsymbol.js'} does not match its sha256")
    assert "\n" not in str(raised.value)
    assert (folder / "tex-chtml.js").read_text() == "the copy already there"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mathjax", "site"]  # no partial left


@pytest.mark.parametrize(
    "relative, message",
    [
        ("tex-chtml.js", r"/tex-chtml\.js is not MathJax 3\.2\.2's"),
        (
            "output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff",
            r"the TeX extensions or fonts in \S+ are not MathJax 3\.2\.2's",
        ),
    ],
)
def test_another_release_is_refused_by_the_pins(tmp_path, relative, message):
    """A package whose RECORD agrees with its files, but not with the pinned digests."""
    package = fake_package(tmp_path / "site", relative, record=True)
    with pytest.raises(mathjax.MathJaxError, match=message):
        mathjax.install_from(package, tmp_path / "mathjax")
    assert not (tmp_path / "mathjax").exists()


def test_a_missing_package_is_named_in_one_line(tmp_path, monkeypatch, capsys):
    """`python -m collapse.book.mathjax` (its main, in this process: a subprocess would spend
    seconds importing torch).
    """
    with monkeypatch.context() as patch:
        patch.setattr(sys, "path", [str(tmp_path / "no-packages-here")])
        assert mathjax.main(["--root", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "collapse.book.mathjax: error: sphinx-mathjax-offline is not installed: "
        "pip install sphinx-mathjax-offline==0.0.2 (or make install)"
    ]
    assert mathjax.main(["--root", str(tmp_path)]) == 0
    assert "copied into" in capsys.readouterr().out
    assert mathjax.main(["--root", str(tmp_path)]) == 0
    assert "already in" in capsys.readouterr().out


def test_the_projects_copy_is_complete():
    folder = ROOT / mathjax.FOLDER
    assert mathjax.is_installed(folder), (
        f"no MathJax {mathjax.VERSION} in {folder}: run `make install`"
    )
    assert files_in(folder) == {*renderer_files(), "LICENSE", "VERSION"}


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
