"""Verdicts: checks computed from a notebook's own data, recorded and shown, never typed in.

A notebook calls `verdict(...)` once per check. The record travels inside the executed
notebook as output metadata (key "collapse_verdict"), which the runner collects into
book/executed/<notebook>.verdicts.json; the outcome is compared with
notebooks/expectations.yml, and the scoreboard page lists every record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from .checks import ParameterError

__all__ = ["verdict", "outcome", "records_from_notebook", "check_expectations", "scoreboard_markdown", "summary_markdown", "OUTCOMES"]

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
        raise ParameterError(f"passed must be a bool computed from the data, got {type(passed).__name__}")
    record = {"key": key, "claim": claim, "paper_ref": paper_ref, "measured": str(measured), "expected": str(expected), "passed": bool(passed)}
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


def records_from_notebook(notebook) -> list[dict]:
    """Verdict records found in an executed notebook's outputs, in order."""
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            record = output.get("metadata", {}).get(METADATA_KEY)
            if record is not None:
                found.append(dict(record))
    return found


def check_expectations(records: list[dict], expectations: dict) -> list[str]:
    """Lines describing every record whose outcome differs from expectations.yml (empty: all match).

    expectations: {notebook: {verdict key: {profile: outcome, "why": reason}}}.
    """
    problems = []
    for r in records:
        expected = expectations.get(r["notebook"], {}).get(r["key"], {}).get(r["profile"])
        got = outcome(r["passed"])
        if expected is None:
            problems.append(f"{r['notebook']} {r['key']} [{r['profile']}]: {got}, but expectations.yml records no outcome")
        elif expected != got:
            problems.append(f"{r['notebook']} {r['key']} [{r['profile']}]: {got}, expected {expected}")
    return problems


def scoreboard_markdown(records: list[dict], expectations: dict) -> str:
    """The scoreboard page: every verdict, not-reproduced claims first, never hidden."""
    ordered = sorted(records, key=lambda r: (r["passed"], r["notebook"]))
    n_ok = sum(r["passed"] for r in records)
    lines = [
        "# Scoreboard",
        "",
        f"Every verdict computed by the executed notebooks: {n_ok} of {len(records)} reproduced. "
        "Claims that did not reproduce come first, with what we measured and why we think so. "
        "The claims and their references are those of {cite:t}`wu2024role` and {cite:t}`naitsaada2025gap`.",
        "",
        "| outcome | notebook | claim | paper | measured | expected | profile |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in ordered:
        why = expectations.get(r["notebook"], {}).get(r["key"], {}).get("why", "")
        mark = "reproduced" if r["passed"] else f"**not reproduced**{': ' + why if why else ''}"
        link = f"[{r['notebook']}]({r['notebook']}.ipynb)"
        cells = [mark, link, f"{r['claim']} (`{r['key']}`)", r["paper_ref"], r["measured"], r["expected"], r["profile"]]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def summary_markdown(records: list[dict], expectations: dict) -> str:
    """A few lines for the intro page: how many verdicts reproduced, and which did not, with why."""
    if not records:
        return "No notebook has been executed yet: run `collapse book` to fill this in.\n"
    failed = [r for r in records if not r["passed"]]
    profiles = ", ".join(sorted({r["profile"] for r in records}))
    lines = [
        f"In this build (profile {profiles}), **{len(records) - len(failed)} of {len(records)} verdicts reproduced**; "
        f"the {{doc}}`scoreboard </book/executed/scoreboard>` lists every one."
    ]
    if failed:
        lines += ["", "Not reproduced:", ""]
        for r in failed:
            why = expectations.get(r["notebook"], {}).get(r["key"], {}).get("why", "see the notebook")
            lines.append(f"- {r['claim']} ({r['paper_ref']}; {{doc}}`/book/executed/{r['notebook']}`): measured {r['measured']}. {why}")
    return "\n".join(lines) + "\n"


def write_json(path: Path, payload) -> None:
    """Write JSON atomically (a reader never sees half a file) and canonically (sorted keys: the same bytes whichever executor ran it)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True))
    tmp.replace(path)
