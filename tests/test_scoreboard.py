from collapse import report
from collapse.book import scoreboard


def record(key="a-b", passed=True, notebook="01-x", profile="fast"):
    return {
        "key": key,
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


def test_scoreboard_lists_failures_first_with_why():
    expectations = {
        "02-y": {
            "c-d": {"fast": "not-reproduced", "why": "LN does not stop complete-mask collapse"}
        }
    }
    page = scoreboard.scoreboard_markdown([record(), record("c-d", False, "02-y")], expectations)
    rows = [line for line in page.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == 2 and "not reproduced" in rows[0] and "LN does not stop" in rows[0]
    assert "1 of 2 reproduced" in page
    summary = scoreboard.summary_markdown([record(), record("c-d", False, "02-y")], expectations)
    assert "1 of 2 verdicts reproduced" in summary and "LN does not stop" in summary
