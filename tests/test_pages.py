"""An executed notebook made into a page: verdicts at a glance, badges, anchors, bookkeeping
off the page, and the artefacts a page must not show."""

import importlib.metadata

import nbformat

from collapse.book import pages
from collapse.report import METADATA_KEY

QUOTE = "Rank collapse happens exponentially for pure attention. It is slower for local masks."


def record(key, passed=True, kind="claim"):
    return {
        "id": f"x/{key}",
        "key": key,
        "kind": kind,
        "decided": True,
        "claim": r"Tokens collapse: $\mu \to 0$",
        "source": "wu2024role, caption of Fig. 2" if kind == "claim" else "",
        "quote": QUOTE if kind == "claim" else "",
        "rows": [],
        "measured": "fall $37.8$",
        "expected": r"$\log\mu(L) \le \log\mu(0) - 2$",
        "passed": passed,
        "notebook": "01-x",
        "profile": "fast",
    }


def executed(records):
    """A small executed chapter: title and prose in one cell, parameters, a check, verdicts."""
    v4 = nbformat.v4
    cells = [
        v4.new_markdown_cell("# A chapter\n\nProse under the title.\n\n:::{prf:theorem}\n:::"),
        v4.new_code_cell("n = 3", metadata={"tags": ["parameters"]}),
        v4.new_code_cell("n = 4", metadata={"tags": ["injected-parameters"]}),
    ]
    for r in records:
        output = v4.new_output(
            "display_data", data={"text/markdown": "plain"}, metadata={METADATA_KEY: r}
        )
        cells.append(v4.new_code_cell("report.check(...)", outputs=[output]))
    cells.append(v4.new_code_cell("# Check: it works", metadata={"tags": ["check"]}))
    cells.append(v4.new_code_cell("# Check: hidden", metadata={"tags": ["hidden-check"]}))
    return v4.new_notebook(cells=cells)


SPEC = "collapse[pretrained] @ git+https://github.com/o/r@abc"
EXPECTATIONS = {
    "01-x": {
        "b": {"fast": "not-reproduced", "short": "Too few layers.", "why": "w", "whose": "paper"}
    }
}
GLANCE_QUOTE = (
    "<br>*“Rank collapse happens exponentially for pure attention.”* "
    "({cite:t}`wu2024role`)"  # where in the paper is told under the verdict
)


def test_the_glance_sits_under_the_title_with_one_row_per_verdict():
    records = [record("a"), record("b", passed=False), record("c", kind="sanity")]
    notebook = executed(records)
    pages.prepare(notebook, records, EXPECTATIONS, "01-x")
    title, glance, prose = notebook.cells[:3]
    assert title.source == "# A chapter" and prose.source.startswith("Prose under the title.")
    assert "verdicts-at-a-glance" in glance.metadata.tags
    rows = [line for line in glance.source.splitlines() if line.startswith("| [")]
    assert rows == [
        r"| [Tokens collapse: $\mu \to 0$](#verdict-x-a)" + GLANCE_QUOTE
        + r" | {bdg-success}`reproduced` | Held to: $\log\mu(L) \le \log\mu(0) - 2$ |",
        r"| [Tokens collapse: $\mu \to 0$](#verdict-x-b)" + GLANCE_QUOTE
        + " | {bdg-danger}`not reproduced` | Against the paper: its sentence does not hold in "
        "the closest setting we run. Too few layers. |",
        r"| [Tokens collapse: $\mu \to 0$](#verdict-x-c) | {bdg-success}`reproduced` "
        r"{bdg-secondary-line}`sanity check` | Held to: $\log\mu(L) \le \log\mu(0) - 2$ |",
    ]  # fmt: skip


def test_each_verdict_is_redrawn_with_its_anchor_and_badge():
    records = [record("a"), record("b", passed=False)]
    notebook = executed(records)
    pages.prepare(notebook, records, EXPECTATIONS, "01-x")
    shown = [
        o["data"]["text/markdown"]
        for c in notebook.cells
        for o in c.get("outputs", [])
        if METADATA_KEY in o.get("metadata", {})
    ]
    assert shown[0].startswith("(verdict-x-a)=\n{bdg-success}`reproduced` **Tokens collapse")
    assert f"\n> “{QUOTE}” ({{cite:t}}`wu2024role`, caption of Fig. 2)\n" in shown[0]
    assert shown[1].startswith("(verdict-x-b)=\n{bdg-danger}`not reproduced`")
    assert "Measured: fall $37.8$" in shown[1]


def test_bookkeeping_is_tagged_off_the_page_and_kept_in_the_notebook():
    records = [record("a")]
    notebook = executed(records)
    pages.prepare(notebook, records, {}, "01-x")
    tags = {c.source.splitlines()[0]: c.metadata.get("tags", []) for c in notebook.cells}
    assert "remove-cell" in tags["n = 4"] and "remove-cell" in tags["# Check: it works"]
    assert "remove-cell" not in tags["n = 3"]  # the parameters a reader may change stay
    # a hidden check stays on the page, folded
    assert "hide-input" in tags["# Check: hidden"] and "remove-cell" not in tags["# Check: hidden"]


def test_the_opening_text_offers_the_source_the_notebook_and_the_verdicts():
    records = [record("a")]
    notebook = executed(records)
    pages.prepare(notebook, records, {}, "01-x")
    sources = [c.source for c in notebook.cells]
    downloads = next(i for i, s in enumerate(sources) if s.startswith("Download this page"))
    assert sources[downloads - 1].startswith("Prose under the title.")
    for target in ("<../../notebooks/01-x.md>", "<01-x.ipynb>", "<01-x.verdicts.json>"):
        assert target in sources[downloads]


def test_an_install_cell_comes_first_off_the_page_only_when_asked(monkeypatch):
    records = [record("a")]
    plain, launched = executed(records), executed(records)
    pages.prepare(plain, records, {}, "01-x")
    pages.prepare(launched, records, {}, "01-x", SPEC)
    assert [c.source for c in launched.cells[1:]] == [c.source for c in plain.cells]
    first = launched.cells[0]
    assert first.cell_type == "code" and repr(SPEC) in first.source
    assert "remove-cell" in first.metadata.tags
    installs = []
    monkeypatch.setattr("subprocess.run", lambda command, check: installs.append(command[-1]))
    exec(first.source, {})  # the distribution is installed here: nothing runs pip
    assert installs == []

    def missing(name):  # a Colab with PyPI's unrelated `collapse`, or none: only ours counts
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr("importlib.metadata.distribution", missing)
    exec(first.source, {})
    assert installs == [SPEC]


def test_a_long_table_scrolls_in_its_own_box_and_a_short_one_does_not():
    def shown(rows):
        lines = ["| a | b |", "|---|--:|", *(f"| {i} | {i * i} |" for i in range(rows))]
        output = nbformat.v4.new_output("display_data", data={"text/markdown": "\n".join(lines)})
        return nbformat.v4.new_code_cell("tables.show(frame)", outputs=[output])

    notebook = executed([])
    notebook.cells += [shown(pages.LONG_TABLE_ROWS), shown(pages.LONG_TABLE_ROWS + 1)]
    pages.prepare(notebook, [], {}, "01-x")
    short, long = notebook.cells[-2:]
    assert pages.table_rows(short) == pages.LONG_TABLE_ROWS
    assert "scroll-output" not in short.metadata.get("tags", [])
    assert "scroll-output" in long.metadata.get("tags", [])


def test_prepare_is_idempotent():
    records = [record("a"), record("b", passed=False)]
    once = executed(records)
    pages.prepare(once, records, EXPECTATIONS, "01-x", SPEC)
    twice = nbformat.from_dict(nbformat.v4.new_notebook(cells=[dict(c) for c in once.cells]))
    pages.prepare(twice, records, EXPECTATIONS, "01-x", SPEC)
    assert [c.source for c in twice.cells] == [c.source for c in once.cells]
    assert [c.metadata for c in twice.cells] == [c.metadata for c in once.cells]


def test_artefacts_are_found_and_named():
    v4 = nbformat.v4
    stream = v4.new_output("stream", name="stderr", text="FutureWarning: /tmp/x.py:3\n")
    result = v4.new_output("execute_result", data={"text/plain": "0.30000000000000004"})
    figure = v4.new_output(
        "display_data",
        data={"image/png": "iVBOR"},
        metadata={"image/png": {"width": 1100, "height": 400}},
    )
    verdict = v4.new_output(
        "display_data",
        data={"text/markdown": "x"},
        metadata={METADATA_KEY: {**record("a"), "expected": "log mu(L) <= log mu(0) - 2"}},
    )
    notebook = v4.new_notebook(
        cells=[
            v4.new_markdown_cell("Reproduced ✅"),
            v4.new_code_cell("x", outputs=[stream, result, figure, verdict]),
        ]
    )
    found = "\n".join(pages.artefacts(notebook))
    for what in (
        "an emoji",
        "stderr output",
        "a warning",
        "a local path",
        "a number with too many digits",
        "a bare repr",
        "1100 px wide",
        "ASCII math in a.expected: '<='",
    ):
        assert what in found, what
    assert pages.ascii_math(r"held to $\mu(X) \le 10^{-3}$") == []
    assert pages.ascii_math("mu(X) <= 1e-3") == ["mu(", "<=", "1e-3"]


def test_a_parameter_name_left_where_a_value_belongs_is_found():
    code = '<code class="docutils literal notranslate"><span class="pre">{}</span></code>'
    page = (
        f"<p>at $T$ = {code.format('gamma_T')}, over {code.format('n_perm')} pairings; run "
        f"<code>collapse</code> with {code.format('--set')}; the parameter "
        f"{code.format('n_seeds')} sets the seeds; rerun with {code.format('n_seeds')} = 40 or "
        '<code class="docutils literal notranslate"><span class="pre">n_seeds</span> '
        '<span class="pre">=</span> <span class="pre">40</span></code>, '
        f"with {code.format('n_seeds')} set to 40, or add 40 to {code.format('n_seeds')} "
        f"([10, 20]).</p>"
        f'<div class="highlight"><pre>x = {code.format("n_layers")}</pre></div>'
    )
    names = {"gamma_T", "n_perm", "n_seeds", "n_layers"}
    assert pages.unfilled_values(page, names) == ["gamma_T", "n_perm"]
