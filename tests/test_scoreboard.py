import pytest

from collapse import report, sources
from collapse.book import scoreboard


def record(key="a-b", passed=True, notebook="01-x", profile="fast", kind="claim", decided=True,
           rows=()):  # fmt: skip
    quoted = kind in ("claim", "analogue")
    return {
        "id": f"{notebook[3:]}/{key}",
        "key": key,
        "kind": kind,
        "decided": decided,
        "claim": "c",
        "source": "wu2024role, abstract" if quoted else "",
        "quote": "Masked attention collapses." if quoted else "",
        "measured": "m",
        "expected": "e",
        "passed": passed,
        "rows": [list(r) for r in rows],
        "notebook": notebook,
        "profile": profile,
    }


def test_records_are_read_from_output_metadata():
    notebook = type("NB", (), {})()
    notebook.cells = [
        {
            "outputs": [
                {"metadata": {}},
                {"metadata": {report.METADATA_KEY: {"key": "x", "passed": False}}},
            ]
        },
        {"cell_type": "markdown"},
    ]
    assert scoreboard.records_from_notebook(notebook) == [{"key": "x", "passed": False}]


def test_expectations_flag_changes_missing_entries_and_failures_without_whose():
    expectations = {
        "01-x": {
            "a-b": {"fast": "reproduced"},
            "c-d": {"fast": "not-reproduced", "why": "float32", "whose": "paper"},
            "g-h": {"fast": "not-reproduced", "why": "ours"},
        }
    }
    assert (
        scoreboard.check_expectations(
            [record(), record("c-d", False), record("g-h", False, kind="extension")],
            expectations,
        )
        == []
    )
    problems = scoreboard.check_expectations(
        [record(passed=False), record("e-f"), record("g-h", False)], expectations
    )
    assert problems[:2] == [
        "01-x a-b [fast]: not-reproduced, expected reproduced",
        "01-x e-f [fast]: reproduced, but expectations.yml records no outcome",
    ]
    assert problems[2].startswith("01-x g-h [fast]: a claim not reproduced needs `whose`")


def test_an_undecided_verdict_is_expected_as_inconclusive():
    expectations = {"01-x": {"a-b": {"fast": "inconclusive", "why": "still rising"}}}
    assert scoreboard.check_expectations([record(decided=False)], expectations) == []
    assert scoreboard.check_expectations([record()], expectations) == [
        "01-x a-b [fast]: reproduced, expected inconclusive"
    ]


def test_counts_per_kind_count_verdicts_with_their_rows_beside():
    records = [
        record(rows=[("complete", "reproduced"), ("causal", "reproduced")]),
        record("c-d", False),
        record("e-f", kind="sanity"),
        record("g-h", False, kind="analogue", decided=False),
        record("i-j", False, kind="extension"),
    ]
    table = scoreboard.counts(records)
    assert table["claim"] == {"reproduced": 1, "not-reproduced": 1}
    assert table["sanity"] == {"reproduced": 1} and table["analogue"] == {"inconclusive": 1}
    assert scoreboard.counts_text(records) == [
        "claim: 2 claims (1 reproduced, 1 not-reproduced), 3 rows",
        "analogue: 1 analogue (1 inconclusive), 1 rows",
        "extension: 1 extension (1 not-reproduced), 1 rows",
        "sanity: 1 sanity check (1 reproduced), 1 rows",
    ]


def test_held_reads_the_reseed_record_at_the_verdicts_profile():
    reseeded = {
        "fast": {
            "families": 3,
            "chapters": {"01-x": {"verdicts": {"a-b": {"reproduced": 2, "not-reproduced": 1}}}},
        }
    }
    assert scoreboard.held(reseeded, record()) == (2, 3)
    assert scoreboard.held(reseeded, record(passed=False)) == (1, 3)
    assert scoreboard.held(reseeded, record(profile="book")) is None
    assert scoreboard.held({}, record()) is None


def book_of_two(tmp_path):
    """Two chapters in two parts, as _toc.yml and the notebooks' titles give them."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01-x.md").write_text("---\n---\n\n# The first chapter\n")
    (tmp_path / "notebooks" / "02-y.md").write_text("# The second chapter\n")
    (tmp_path / "_toc.yml").write_text(
        "root: book/intro\nparts:\n"
        "  - caption: Paper A\n    chapters:\n      - file: book/executed/01-x\n"
        "  - caption: Paper B\n    chapters:\n      - file: book/executed/02-y\n"
        "      - file: book/methods\n"
    )
    return scoreboard.chapters(tmp_path)


def test_chapters_come_from_the_toc_with_their_titles(tmp_path):
    book = book_of_two(tmp_path)
    assert [(c.name, c.number, c.title, c.part) for c in book] == [
        ("01-x", 1, "The first chapter", "Paper A"),
        ("02-y", 2, "The second chapter", "Paper B"),
    ]


EXPECTATIONS = {
    "02-y": {
        "c-d": {
            "fast": "not-reproduced",
            "short": "LN does not stop complete-mask collapse.",
            "why": "at the float64 floor by layer 4 under every init",
            "whose": "paper",
        }
    }
}
RESEEDED = {"fast": {"chapters": {"02-y": {"verdicts": {"c-d": {"not-reproduced": 3}}}}}}


def test_scoreboard_puts_claims_under_their_paper_and_our_own_questions_apart(tmp_path):
    book = book_of_two(tmp_path)
    records = [
        record(rows=[("complete", "reproduced"), ("causal", "reproduced")]),
        record("c-d", False, "02-y"),
        record("e-f", kind="sanity"),
        record("g-h", False, "02-y", kind="extension"),
    ]
    page = scoreboard.scoreboard_markdown(records, EXPECTATIONS, book, RESEEDED)
    headings = [line for line in page.splitlines() if line.startswith("#")]
    assert headings == [
        "# Scoreboard",
        "## Paper A",
        "### 1. The first chapter",
        "## Paper B",
        "### 2. The second chapter",
        "## Extensions: our own questions",
        "### 2. The second chapter",
        "## Sanity checks of our own code",
        "### 1. The first chapter",
    ]
    overview = page.split("::::{container} scoreboard-overview")[1].split("::::")[0]
    assert "| [1. The first chapter](01-x.ipynb) | 1 | 1 | 0 | 0 | 0 | 1 |" in overview
    assert "| [2. The second chapter](02-y.ipynb) | 1 | 0 | 1 | 0 | 1 | 0 |" in overview
    claims_b = page.split("## Paper B")[1].split("## Extensions")[0]
    assert claims_b.count("::::{container} scoreboard-verdict") == 1
    assert "{bdg-danger}`not reproduced` [c](#verdict-y-c-d) (`y/c-d`)" in claims_b
    assert "> “Masked attention collapses.” ({cite:t}`wu2024role`, abstract)" in claims_b
    assert "Against the paper:" in claims_b and "LN does not stop" in claims_b
    assert "Held in 3 of 3 seed families." in claims_b
    assert "Why: at the float64 floor" in claims_b.split(":::{dropdown}")[1]
    claims_a = page.split("## Paper A")[1].split("## Paper B")[0]
    assert "Rows: complete reproduced; causal reproduced." in claims_a
    extensions = page.split("## Extensions")[1].split("## Sanity")[0]
    assert (
        "{bdg-secondary-line}`extension`" in extensions and "Against the paper" not in extensions
    )
    assert "- Claims of the papers: 1 of 2 claims reproduced (1 not reproduced)." in page
    assert "- Extensions: our own questions: 0 of 1 extension reproduced" in page


def test_failures_come_first_within_a_chapter(tmp_path):
    book = book_of_two(tmp_path)
    records = [record("a-b"), record("g-h", False), record("i-j", decided=False)]
    page = scoreboard.scoreboard_markdown(records, {}, book)
    order = [key for key in ("g-h", "i-j", "a-b") if f"`x/{key}`" in page]
    assert sorted(order, key=page.index) == ["g-h", "i-j", "a-b"]


def test_summary_counts_claims_and_sets_extensions_apart(tmp_path):
    book = book_of_two(tmp_path)
    records = [
        record(),
        record("c-d", False, "02-y"),
        record("e-f", kind="sanity"),
        record("g-h", kind="extension", notebook="02-y"),
    ]
    summary = scoreboard.summary_markdown(records, EXPECTATIONS, book)
    assert "**Claims of the papers**: 1 of 2 claims reproduced" in summary
    assert "**Sanity checks of our own code**: 1 of 1 sanity check reproduced" in summary
    assert summary.index("**Paper A**") < summary.index("**Paper B**")
    rows = [line for line in summary.splitlines() if line.startswith("| {doc}")]
    assert rows == [
        "| {doc}`1. The first chapter </book/executed/01-x>` | {bdg-success}`reproduced` "
        "all 1 claim. |",
        "| {doc}`2. The second chapter </book/executed/02-y>` | {bdg-danger}`not reproduced` "
        "c: Against the paper: its sentence does not hold in the closest setting we run. "
        "LN does not stop complete-mask collapse. (1 extension beside.) |",
    ]
    assert "executed/overview.png" in summary


def test_the_overview_figure_is_drawn_at_page_width(tmp_path):
    from PIL import Image

    book = book_of_two(tmp_path)
    records = [record(), record("c-d", False, "02-y")]
    path = tmp_path / "overview.png"
    scoreboard.overview_figure(records, book, path)
    width, _ = Image.open(path).size
    assert 1200 <= width <= 1400  # 6.6 in at 200 dpi, shown at 660 px


def test_the_glance_shows_the_words_a_verdict_tests_and_the_verdict_sets_them_in_bold():
    quoted = sources.QUOTES["wu-masked-collapse"]
    masked = {**record(), "quote": quoted.text, "source": quoted.reference}
    cell = scoreboard.glance_claim(masked)
    assert (
        "*“… pure masked attention still suffers from exponential collapse to a rank one "
        "subspace …”*" in cell
    )  # the collapse it tests, not "In particular, we find ..."
    assert (
        "**pure masked attention still suffers from exponential collapse to a rank one "
        "subspace**, sparse or local" in scoreboard.quote_markdown(masked)
    )  # the whole sentence
    with pytest.raises(ValueError, match="gist must be words of the quote"):
        sources.Source("wu2024role", "abstract", "Masked attention collapses.", gist="slowly")


def test_the_glance_keeps_the_opening_and_close_of_words_no_longer_registered():
    long = {
        **record(),
        "quote": "Our framework offers a fresh perspective on recent studies, such as (Ye et al., "
        "2024; Ali et al., 2023), whose ad hoc solutions can now be interpreted as implicit "
        "efforts to address the spectral gap issue. A second sentence.",
    }
    cell = scoreboard.glance_claim(long)
    assert "*“Our framework offers a fresh perspective on recent … " in cell
    assert " to address the spectral gap issue.”*" in cell  # its point, not cut at "2024;"
    assert "second sentence" not in cell
    assert "Masked attention collapses." in scoreboard.glance_claim(record())  # short: whole
