"""Verdicts: checks computed from a notebook's own data, recorded and shown, never typed in.

A notebook calls `verdict(...)` once per check. The record travels inside the executed
notebook as output metadata (key "collapse_verdict"), which the `collapse` command
collects into book/executed/<notebook>.verdicts.json, compares with
notebooks/expectations.yml and lists on the scoreboard page (collapse.book.scoreboard).

Every verdict says what it tested (its `kind`), so that identities of our own code are
never counted as reproduced claims of a paper.
"""

from __future__ import annotations

import re

import numpy as np

from .checks import ParameterError

__all__ = ["verdict", "outcome", "OUTCOMES", "KINDS", "KIND_LABELS", "METADATA_KEY"]

OUTCOMES = ("reproduced", "not-reproduced", "inconclusive")
KINDS = {
    "claim": "a claim of a paper, in the paper's setting or the closest we can run",
    "analogue": "a claim of a paper run on a stand-in (another checkpoint, another corpus)",
    "sanity": "an identity that holds by construction of our code, not a claim of a paper",
}
METADATA_KEY = "collapse_verdict"
_KEY = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def outcome(record_or_passed) -> str:
    """'reproduced', 'not-reproduced' or 'inconclusive' for a verdict record (or a bool)."""
    if isinstance(record_or_passed, dict):
        if not record_or_passed.get("decided", True):
            return OUTCOMES[2]
        return OUTCOMES[0] if record_or_passed["passed"] else OUTCOMES[1]
    return OUTCOMES[0] if record_or_passed else OUTCOMES[1]


def verdict(
    key: str,
    claim: str,
    paper_ref: str,
    measured: str,
    expected: str,
    passed,
    *,
    kind: str,
    decided=True,
) -> dict:
    """Record and display one verdict; `passed` (and `decided`) must be computed from the data.

    key: a stable id (lowercase, digits, dashes) used by expectations.yml;
    claim: what the paper says, in one sentence; paper_ref: where it says it;
    measured / expected: what we found and the threshold it was held to, as text;
    kind: what was tested, one of KINDS; decided: False when the data cannot settle the
    claim (the outcome is then 'inconclusive' and `measured` should say why).
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ParameterError(f"key must be lowercase letters, digits and dashes, got {key!r}")
    for name, value in (("passed", passed), ("decided", decided)):
        if not isinstance(value, (bool, np.bool_)):
            raise ParameterError(
                f"{name} must be a bool computed from the data, got {type(value).__name__}"
            )
    if kind not in KINDS:
        raise ParameterError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    record = {
        "key": key,
        "kind": kind,
        "claim": claim,
        "paper_ref": paper_ref,
        "measured": str(measured),
        "expected": str(expected),
        "passed": bool(passed),
        "decided": bool(decided),
    }
    _display(record)
    return record


# What a verdict line adds after its key, so that a stand-in or a sanity check reads as one.
KIND_LABELS = {"claim": "", "analogue": " (on a stand-in)", "sanity": " (sanity check)"}


def _display(record: dict) -> None:
    """The verdict as Markdown (math in `$...$` typesets in Jupyter and in the book, where
    collapse.book.pages redraws it from the record with a badge and an anchor)."""
    mark = outcome(record).replace("-", " ")
    text = (
        f"**Verdict `{record['key']}`{KIND_LABELS[record['kind']]}: {mark}.** "
        f"{record['claim']} ({record['paper_ref']})  \n"
        f"Measured: {record['measured']}  \nExpected: {record['expected']}"
    )
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:  # plain Python without IPython
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display(Markdown(text), metadata={METADATA_KEY: record})
