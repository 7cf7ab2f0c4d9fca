import json

import numpy as np
import pytest

from collapse import report
from collapse.checks import ParameterError


def record(key="a-b", passed=True, notebook="01-x", profile="fast"):
    return {"key": key, "claim": "c", "paper_ref": "p", "measured": "m", "expected": "e", "passed": passed, "notebook": notebook, "profile": profile}


def test_verdict_returns_the_record_and_prints_outside_ipython(capsys):
    r = report.verdict("w1-collapse", "mu falls", "Wu Thm 1", "-35.1", "<= -2", np.bool_(True))
    assert r == {"key": "w1-collapse", "claim": "mu falls", "paper_ref": "Wu Thm 1", "measured": "-35.1", "expected": "<= -2", "passed": True}
    assert type(r["passed"]) is bool
    assert "✅ reproduced" in capsys.readouterr().out
    report.verdict("w1-collapse", "mu falls", "Wu Thm 1", "-1", "<= -2", False)
    assert "❌ not reproduced" in capsys.readouterr().out


@pytest.mark.parametrize("key, passed, match", [("W1 collapse", True, "key must be lowercase"), ("ok", "yes", "passed must be a bool")])
def test_verdict_rejects_bad_keys_and_typed_in_outcomes(key, passed, match):
    with pytest.raises(ParameterError, match=match):
        report.verdict(key, "c", "p", "m", "e", passed)


def test_records_are_read_from_output_metadata():
    notebook = type("NB", (), {})()
    notebook.cells = [
        {"outputs": [{"metadata": {}}, {"metadata": {report.METADATA_KEY: {"key": "x", "passed": False}}}]},
        {"cell_type": "markdown"},
    ]
    assert report.records_from_notebook(notebook) == [{"key": "x", "passed": False}]


def test_expectations_flag_changes_and_missing_entries():
    expectations = {"01-x": {"a-b": {"fast": "reproduced"}, "c-d": {"fast": "not-reproduced", "why": "float32"}}}
    assert report.check_expectations([record(), record("c-d", False)], expectations) == []
    problems = report.check_expectations([record(passed=False), record("e-f")], expectations)
    assert problems == [
        "01-x a-b [fast]: not-reproduced, expected reproduced",
        "01-x e-f [fast]: reproduced, but expectations.yml records no outcome",
    ]


def test_scoreboard_lists_failures_first_with_why():
    expectations = {"02-y": {"c-d": {"fast": "not-reproduced", "why": "LN does not stop complete-mask collapse"}}}
    page = report.scoreboard_markdown([record(), record("c-d", False, "02-y")], expectations)
    rows = [line for line in page.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == 2 and "not reproduced" in rows[0] and "LN does not stop" in rows[0]
    assert "1 of 2 reproduced" in page
    summary = report.summary_markdown([record(), record("c-d", False, "02-y")], expectations)
    assert "1 of 2 verdicts reproduced" in summary and "LN does not stop" in summary


def test_write_json_is_atomic(tmp_path):
    target = tmp_path / "v.json"
    report.write_json(target, [1, 2])
    assert json.loads(target.read_text()) == [1, 2] and not list(tmp_path.glob("*.tmp"))
