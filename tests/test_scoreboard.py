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


def test_scoreboard_groups_by_kind_failures_first_with_why_and_links():
    expectations = {
        "02-y": {
            "c-d": {"fast": "not-reproduced", "why": "LN does not stop complete-mask collapse"}
        }
    }
    records = [record(), record("c-d", False, "02-y"), record("e-f", kind="sanity")]
    page = scoreboard.scoreboard_markdown(records, expectations)
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    assert headings == ["## Claims of the papers", "## Sanity checks of our own code"]
    claims = page.split("## Claims of the papers")[1].split("## Sanity")[0]
    rows = [line for line in claims.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == 2 and rows[0].startswith("| **not reproduced** | [02-y]")
    cells = [c.strip() for c in rows[0].split(" | ")]
    assert cells[5] == "LN does not stop complete-mask collapse"  # its own "why" column
    assert "(02-y.ipynb#verdicts)" in rows[0]
    assert "1 of 2 reproduced (1 not reproduced)" in page and "e-f" not in claims
    summary = scoreboard.summary_markdown(records, expectations)
    assert "**Claims of the papers**: 1 of 2 reproduced" in summary
    assert "**Sanity checks of our own code**: 1 of 1 reproduced" in summary
    assert "LN does not stop" in summary
