from collapse import report
from collapse.book import scoreboard


def record(key="a-b", passed=True, notebook="01-x", profile="fast", kind="claim", decided=True):
    return {
        "key": key,
        "kind": kind,
        "decided": decided,
        "claim": "c",
        "paper_ref": "p",
        "measured": "m",
        "expected": "e",
        "passed": passed,
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


def test_expectations_flag_changes_and_missing_entries():
    expectations = {
        "01-x": {
            "a-b": {"fast": "reproduced"},
            "c-d": {"fast": "not-reproduced", "why": "float32"},
        }
    }
    assert scoreboard.check_expectations([record(), record("c-d", False)], expectations) == []
    problems = scoreboard.check_expectations([record(passed=False), record("e-f")], expectations)
    assert problems == [
        "01-x a-b [fast]: not-reproduced, expected reproduced",
        "01-x e-f [fast]: reproduced, but expectations.yml records no outcome",
    ]


def test_an_undecided_verdict_is_expected_as_inconclusive():
    expectations = {"01-x": {"a-b": {"fast": "inconclusive", "why": "still rising"}}}
    assert scoreboard.check_expectations([record(decided=False)], expectations) == []
    assert scoreboard.check_expectations([record()], expectations) == [
        "01-x a-b [fast]: reproduced, expected inconclusive"
    ]


def test_counts_per_kind_and_outcome():
    records = [
        record(),
        record("c-d", False),
        record("e-f", kind="sanity"),
        record("g-h", False, kind="analogue", decided=False),
    ]
    table = scoreboard.counts(records)
    assert table["claim"] == {"reproduced": 1, "not-reproduced": 1}
    assert table["sanity"] == {"reproduced": 1} and table["analogue"] == {"inconclusive": 1}
    assert scoreboard.counts_text(records) == [
        "claim: 2 verdicts, 1 reproduced, 1 not-reproduced",
        "analogue: 1 verdicts, 1 inconclusive",
        "sanity: 1 verdicts, 1 reproduced",
    ]


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
        }
    }
}


def test_scoreboard_groups_by_paper_and_chapter_with_badges_reasons_and_links(tmp_path):
    book = book_of_two(tmp_path)
    records = [record(), record("c-d", False, "02-y"), record("e-f", kind="sanity")]
    page = scoreboard.scoreboard_markdown(records, EXPECTATIONS, book)
    headings = [line for line in page.splitlines() if line.startswith("#")]
    assert headings == [
        "# Scoreboard",
        "## Paper A",
        "### 1. The first chapter",
        "## Paper B",
        "### 2. The second chapter",
    ]
    overview = page.split("::::{container} scoreboard-overview")[1].split("::::")[0]
    assert "| [1. The first chapter](01-x.ipynb) | 2 | 2 | 0 | 0 |" in overview
    assert "| [2. The second chapter](02-y.ipynb) | 1 | 0 | 1 | 0 |" in overview
    second = page.split("### 2. The second chapter")[1]
    assert second.count("::::{container} scoreboard-verdict") == 1
    assert "{bdg-danger}`not reproduced` [c](#verdict-c-d) (p; `c-d`)" in second
    assert "LN does not stop complete-mask collapse." in second  # the short reason, unfolded
    assert "Why: at the float64 floor" in second.split(":::{dropdown}")[1]  # the long one, folded
    first = page.split("### 1. The first chapter")[1].split("## Paper B")[0]
    assert "{bdg-secondary-line}`sanity check`" in first and "Held to: e" in first
    assert "1 of 2 reproduced (1 not reproduced)" in page


def test_failures_come_first_within_a_chapter(tmp_path):
    book = book_of_two(tmp_path)
    records = [record("a-b"), record("g-h", False), record("i-j", decided=False)]
    page = scoreboard.scoreboard_markdown(records, {}, book)
    order = [key for key in ("g-h", "i-j", "a-b") if f"`{key}`" in page]
    assert sorted(order, key=page.index) == ["g-h", "i-j", "a-b"]


def test_summary_has_one_row_per_chapter_in_a_table_per_paper(tmp_path):
    book = book_of_two(tmp_path)
    records = [record(), record("c-d", False, "02-y"), record("e-f", kind="sanity")]
    summary = scoreboard.summary_markdown(records, EXPECTATIONS, book)
    assert "**Claims of the papers**: 1 of 2 reproduced" in summary
    assert "**Sanity checks of our own code**: 1 of 1 reproduced" in summary
    assert summary.index("**Paper A**") < summary.index("**Paper B**")
    rows = [line for line in summary.splitlines() if line.startswith("| {doc}")]
    assert rows == [
        "| {doc}`1. The first chapter </book/executed/01-x>` | {bdg-success}`reproduced` "
        "all 1 verdicts. |",
        "| {doc}`2. The second chapter </book/executed/02-y>` | {bdg-danger}`not reproduced` "
        "c: LN does not stop complete-mask collapse. |",
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
