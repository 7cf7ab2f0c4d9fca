"""Verdicts: checks computed from a notebook's own data, recorded and shown, never typed in.

A notebook calls `verdict(...)` once per check. The record travels inside the executed
notebook as output metadata (key "collapse_verdict"), which the `collapse` command
collects into book/executed/<notebook>.verdicts.json, compares with
notebooks/expectations.yml and lists on the scoreboard page (collapse.book.scoreboard).
"""

from __future__ import annotations

import re

import numpy as np

from .checks import ParameterError

__all__ = ["verdict", "outcome", "OUTCOMES", "METADATA_KEY"]

OUTCOMES = ("reproduced", "not-reproduced")
METADATA_KEY = "collapse_verdict"
_KEY = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def outcome(passed: bool) -> str:
    return OUTCOMES[0] if passed else OUTCOMES[1]


def verdict(key: str, claim: str, paper_ref: str, measured: str, expected: str, passed) -> dict:
    """Record and display one verdict; `passed` must be computed from the data.

    key: a stable id (lowercase, digits, dashes) used by expectations.yml;
    claim: what the paper says, in one sentence; paper_ref: where it says it;
    measured / expected: what we found and the threshold it was held to, as text.
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ParameterError(f"key must be lowercase letters, digits and dashes, got {key!r}")
    if not isinstance(passed, (bool, np.bool_)):
        raise ParameterError(
            f"passed must be a bool computed from the data, got {type(passed).__name__}"
        )
    record = {
        "key": key,
        "claim": claim,
        "paper_ref": paper_ref,
        "measured": str(measured),
        "expected": str(expected),
        "passed": bool(passed),
    }
    _display(record)
    return record


def _display(record: dict) -> None:
    mark = "✅ reproduced" if record["passed"] else "❌ not reproduced"
    text = (
        f"**Verdict `{record['key']}`: {mark}.** {record['claim']} ({record['paper_ref']})  \n"
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
