"""Sphinx extension: the built book reads offline, with MathJax from its own files, on every page.

Loaded through `sphinx: local_extensions` in _config.yml rather than from the `collapse`
package: importing that package imports torch, which would add seconds to every build
for three small event handlers. The copy itself is fetched by `python -m collapse.book.mathjax`
(run by `make install`) into book/_static/mathjax; tests/test_browser.py checks the result
in a real browser, which is where the two page fixes below were found.
"""

from __future__ import annotations

from pathlib import Path

from sphinx.errors import ConfigError

FETCH = "run `make install` or `python -m collapse.book.mathjax`"


def _check_local_copy(app) -> None:
    """builder-inited: MathJax must come from the book's own static files, and they must be there.

    A ConfigError, because Sphinx passes its own errors through event handlers unwrapped: one line.
    """
    if app.builder.format != "html":
        return
    path = app.config.mathjax_path
    if "://" in path or path.startswith("//"):
        raise ConfigError(
            f"mathjax_path is {path}: the book must load MathJax from its own files; set it to "
            "mathjax/tex-chtml.js"
        )
    if not any(
        Path(app.confdir, folder, path).is_file() for folder in app.config.html_static_path
    ):
        raise ConfigError(
            f"MathJax is missing: no {path} in the book's static files (book/_static): {FETCH}"
        )


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree) -> None:
    """html-page-context: list every script once.

    Sphinx 7.4 lists an inline script registered after the builder started twice (once with
    filename None, once with ''); sphinx-thebe's `const THEBE_JS_URL = ...` is one, and its
    second copy is a SyntaxError in the console of every page.
    """
    scripts, seen = context.get("script_files", []), set()
    unique = []
    for script in scripts:
        key = (script.filename or "", script.priority, tuple(sorted(script.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def setup(app) -> dict:
    """Check the local MathJax copy before anything is read, load it on every page, list scripts
    once.

    Every page, not only those with math of their own: the navigation shows chapter titles
    that hold math (e.g. the temperature chapter's $d_{QK}$), which stay raw TeX without it.
    """
    app.set_html_assets_policy("always")
    app.connect("builder-inited", _check_local_copy)
    app.connect("html-page-context", _drop_duplicate_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
