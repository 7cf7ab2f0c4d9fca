import numpy as np
import pytest

from collapse import report
from collapse.checks import ParameterError


def test_verdict_returns_the_record_and_prints_outside_ipython(capsys):
    r = report.verdict("w1-collapse", "mu falls", "Wu Thm 1", "-35.1", "<= -2", np.bool_(True))
    assert r == {
        "key": "w1-collapse",
        "claim": "mu falls",
        "paper_ref": "Wu Thm 1",
        "measured": "-35.1",
        "expected": "<= -2",
        "passed": True,
    }
    assert type(r["passed"]) is bool
    assert "✅ reproduced" in capsys.readouterr().out
    report.verdict("w1-collapse", "mu falls", "Wu Thm 1", "-1", "<= -2", False)
    assert "❌ not reproduced" in capsys.readouterr().out


@pytest.mark.parametrize(
    "key, passed, match",
    [("W1 collapse", True, "key must be lowercase"), ("ok", "yes", "passed must be a bool")],
)
def test_verdict_rejects_bad_keys_and_typed_in_outcomes(key, passed, match):
    with pytest.raises(ParameterError, match=match):
        report.verdict(key, "c", "p", "m", "e", passed)
