"""The whole book, executed in the fast profile and built clean with -W -n (any warning fails)."""

import html
import json
import re
import shutil
import subprocess
import sys

import yaml
from conftest import REPOSITORY, fast_book_command

from collapse import report, sources
from collapse.book import launch, pages, runner, scoreboard


def test_book_builds_without_warnings(fast_book):
    root, result = fast_book
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert (root / "_build" / "html" / "index.html").is_file()


def test_every_notebook_is_in_the_toc_and_rendered(fast_book):
    root, _ = fast_book
    toc = (root / "_toc.yml").read_text()
    for name in runner.Project(root).notebooks():
        assert f"book/executed/{name}" in toc, f"{name} is missing from _toc.yml"
        page = (root / "_build" / "html" / "book" / "executed" / f"{name}.html").read_text()
        assert "Verdict" in page
        assert (
            'class="proof theorem admonition"' in page
            or 'class="proof proposition admonition"' in page
        )
        assert page.count('class="exercise admonition"') >= 2 and page.count("solution") >= 2
        # download links to the MyST source, the executed notebook and the verdict records
        for suffix in (".md", ".ipynb", ".verdicts.json"):
            link = re.search(
                rf'href="(\.\./\.\./_downloads/[0-9a-f]+/{re.escape(name + suffix)})"', page
            )
            assert link, f"{name}: no download link to {name}{suffix}"
            assert (root / "_build" / "html" / link.group(1)[len("../../") :]).is_file()


def test_scoreboard_and_intro_list_every_verdict(fast_book):
    root, _ = fast_book
    records = runner.collect_records(runner.Project(root))
    assert records
    page = (root / "_build" / "html" / "book" / "executed" / "scoreboard.html").read_text()
    for record in records:
        assert (
            '<code class="docutils literal notranslate">'
            f'<span class="pre">{record["id"]}</span></code>' in page
        )
    intro = (root / "_build" / "html" / "book" / "intro.html").read_text()
    for kind, tally in scoreboard.counts(records).items():
        total = sum(tally.values())
        if total:  # the intro counts as the scoreboard does: verdicts per kind, rows apart
            counted = (
                f"{tally['reproduced']} of {total} {scoreboard._noun(kind, total)} reproduced"
            )
            assert counted in intro and counted in page, kind
    assert "Wu <em>et al.</em>, 2024" in intro
    assert '<section id="extensions-our-own-questions">' in page


def _words(page: str) -> str:
    """A built page's words, without its tags (a gist in bold breaks no sentence)."""
    return re.sub(r"<[^>]+>", "", page)


def test_every_claim_shows_the_sentence_it_tests(fast_book):
    """On its chapter's page, the words it tests at a glance and the whole sentence under the
    verdict (those words in bold), and on the scoreboard."""
    root, _ = fast_book
    site = root / "_build" / "html" / "book" / "executed"
    scoreboard_page = _words(html.unescape((site / "scoreboard.html").read_text()))
    for record in runner.collect_records(runner.Project(root)):
        if record["kind"] in ("claim", "analogue"):
            quoted = sources.registered(record["quote"])
            assert quoted and record["source"] == quoted.reference, record["id"]
            page = html.unescape((site / f"{record['notebook']}.html").read_text())
            text = _words(page)
            opening = quoted.text.split("$")[0][:25]  # its opening words, before any math
            gist = (quoted.gist or quoted.text).split("$")[0][:25]
            assert text.count(gist) >= 2, (record["id"], gist)  # glance and verdict
            assert opening in text and opening in scoreboard_page, (record["id"], opening)
            if quoted.gist:
                assert f"<strong>{gist}" in page, (record["id"], gist)


def test_no_page_shows_a_variable_name_where_a_value_belongs(fast_book):
    root, _ = fast_book
    site = root / "_build" / "html" / "book"
    names = {name for nb in runner.Project(root).notebooks().values() for name in nb.defaults}
    found = {
        page.name: pages.unfilled_values(page.read_text(), names)
        for page in [*site.glob("executed/*.html"), *site.glob("*.html")]
    }
    assert not {name: names for name, names in found.items() if names}


def test_the_status_page_lists_every_chapter_with_its_digest(fast_book):
    root, _ = fast_book
    page = (root / "_build" / "html" / "book" / "executed" / "status.html").read_text()
    for name in runner.Project(root).notebooks():
        executed = json.loads((root / "book" / "executed" / f"{name}.ipynb").read_text())
        meta = executed["metadata"]["collapse"]
        assert meta["profile"] == "fast" and meta["finished"].endswith("Z")
        assert meta["hash"][:12] in page, name


def test_definitions_render_as_proof_blocks(fast_book):
    root, _ = fast_book
    intro = (root / "_build" / "html" / "book" / "intro.html").read_text()
    assert intro.count('class="proof definition admonition"') == 3


def test_a_broken_reference_fails_the_build(fast_book, tmp_path):
    """On a copy of the executed project, so that the other tests keep the good build; its
    table of contents holds one page, with a good reference and a broken one (the chapters
    are run as for the whole book, but only that page is built: seconds, not minutes)."""
    root = tmp_path / "project"
    shutil.copytree(fast_book[0], root, ignore=shutil.ignore_patterns("_build"))
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/broken\n")
    (root / "book" / "broken.md").write_text(
        "(a-label)=\n# A page\n\nSee {ref}`a-label` and {ref}`no-such-label`.\n"
    )
    result = subprocess.run(fast_book_command(root), capture_output=True, text=True, timeout=900)
    assert result.returncode == 1
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "undefined label: 'no-such-label'" in warnings[0], warnings
    assert "cached" in result.stdout  # the notebooks were not executed again


def test_verdicts_json_lists_every_record(fast_book):
    root, _ = fast_book
    result = subprocess.run(
        [sys.executable, "-m", "collapse", "--root", str(root), "verdicts", "--json"],
        capture_output=True,
        text=True,
    )
    records = json.loads(result.stdout)
    assert {r["profile"] for r in records} == {"fast"}
    fields = {"id", "kind", "claim", "source", "quote", "measured", "expected", "outcome"}
    assert all(set(r) >= fields for r in records)
    expectations = yaml.safe_load((root / "notebooks" / "expectations.yml").read_text()) or {}
    assert result.returncode == (0 if all(
        expectations.get(r["notebook"], {}).get(r["key"], {}).get("fast")
        == report.outcome(r)
        for r in records
    ) else 1)  # fmt: skip


def test_every_chapter_launches_its_published_notebook_on_colab_and_binder(fast_book):
    """Each launch link names a path in the published tree (the gh-pages branch is the
    site), which must hold that page's executed notebook and, for Binder, binder/."""
    root, _ = fast_book
    site = root / "_build" / "html"
    owner_repo = REPOSITORY.removeprefix("https://github.com/")
    colab = re.compile(
        rf'href="{re.escape(launch.COLAB)}/github/{owner_repo}/blob/gh-pages/([^"]+)"'
    )
    binder = re.compile(
        rf'href="{re.escape(launch.BINDERHUB)}/v2/gh/{owner_repo}/gh-pages\?urlpath=lab/tree/([^"]+)"'
    )
    for name in runner.Project(root).notebooks():
        page = (site / "book" / "executed" / f"{name}.html").read_text()
        targets = colab.findall(page) + binder.findall(page)
        assert targets == [f"_sources/book/executed/{name}.ipynb"] * 2, name
        published = json.loads((site / targets[0]).read_text())
        first = published["cells"][0]
        assert "remove-cell" in first["metadata"]["tags"], name
        assert f"{REPOSITORY}@" in "".join(first["source"]), name  # installs when missing
        assert '<link rel="canonical" href="https://example-org.github.io/rank-collapse/' in page
    assert any(
        line.startswith("numpy==")
        for line in (site / "binder" / "requirements.txt").read_text().splitlines()
    )
    postbuild = (site / "binder" / "postBuild").read_text()
    assert f"'rank-collapse[pretrained] @ git+{REPOSITORY}@main'" in postbuild  # not a checkout


def test_every_figure_offers_its_data_beside_it(fast_book):
    """Each figure on a chapter page has a CSV of its points in the site, linked on the page."""
    root, _ = fast_book
    site = root / "_build" / "html"
    for name in runner.Project(root).notebooks():
        executed = json.loads((root / "book" / "executed" / f"{name}.ipynb").read_text())
        figures = sum(
            "image/png" in output.get("data", {})
            for cell in executed["cells"]
            if "remove-cell" not in cell["metadata"].get("tags", [])
            for output in cell.get("outputs", [])
        )
        page = (site / "book" / "executed" / f"{name}.html").read_text()
        links = re.findall(r'href="\.\./\.\./(_downloads/[0-9a-f]+/[^"]+\.csv)"', page)
        assert figures and len(links) == figures, (name, figures, links)
        for link in links:
            header = (site / link).read_text().splitlines()[0]
            assert len(header.split(",")) >= 2, (name, link, header)
