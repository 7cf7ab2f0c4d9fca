import numpy as np
import pytest

from collapse import report
from collapse.checks import ParameterError


def test_verdict_returns_the_record_and_prints_outside_ipython(capsys):
    r = report.verdict(
        "w1-collapse", "mu falls", "Wu Thm 1", "-35.1", "<= -2", np.bool_(True), kind="claim"
    )
    assert r == {
        "key": "w1-collapse",
        "kind": "claim",
        "claim": "mu falls",
        "paper_ref": "Wu Thm 1",
        "measured": "-35.1",
        "expected": "<= -2",
        "passed": True,
        "decided": True,
    }
    assert type(r["passed"]) is bool
    assert ": reproduced." in capsys.readouterr().out
    report.verdict("w1-collapse", "mu falls", "Wu Thm 1", "-1", "<= -2", False, kind="claim")
    assert ": not reproduced." in capsys.readouterr().out


def test_a_verdict_says_what_it_tested_and_can_be_undecided(capsys):
    sanity = report.verdict(
        "a-ones", "A1 = 1", "by construction", "0", "< 1e-12", True, kind="sanity"
    )
    assert "(sanity check): reproduced." in capsys.readouterr().out
    assert report.outcome(sanity) == "reproduced"
    open_ = report.verdict(
        "w1-rate",
        "rate",
        "Thm 1",
        "still rising",
        "<= 0",
        False,
        kind="analogue",
        decided=np.bool_(False),
    )
    assert "(on a stand-in): inconclusive." in capsys.readouterr().out
    assert report.outcome(open_) == "inconclusive" and open_["decided"] is False
    assert report.outcome(True) == "reproduced" and report.outcome(False) == "not-reproduced"


@pytest.mark.parametrize(
    "key, passed, kind, decided, match",
    [
        ("W1 collapse", True, "claim", True, "key must be lowercase"),
        ("ok", "yes", "claim", True, "passed must be a bool"),
        ("ok", True, "claim", 1, "decided must be a bool"),
        ("ok", True, "theorem", True, "kind must be one of claim, analogue, sanity"),
    ],
)
def test_verdict_rejects_bad_keys_kinds_and_typed_in_outcomes(key, passed, kind, decided, match):
    with pytest.raises(ParameterError, match=match):
        report.verdict(key, "c", "p", "m", "e", passed, kind=kind, decided=decided)


def test_a_verdict_without_a_kind_is_refused():
    with pytest.raises(TypeError, match="kind"):
        report.verdict("ok", "c", "p", "m", "e", True)
