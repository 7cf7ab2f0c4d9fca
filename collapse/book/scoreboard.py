"""The verdict records of executed notebooks: collected, checked against expectations.yml,
and written as the scoreboard and the intro's summary."""

from __future__ import annotations

from ..report import METADATA_KEY, outcome

__all__ = [
    "records_from_notebook",
    "check_expectations",
    "scoreboard_markdown",
    "summary_markdown",
]


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
    """Lines describing every record whose outcome differs from expectations.yml (empty: all
    match).

    expectations: {notebook: {verdict key: {profile: outcome, "why": reason}}}.
    """
    problems = []
    for r in records:
        expected = expectations.get(r["notebook"], {}).get(r["key"], {}).get(r["profile"])
        got = outcome(r["passed"])
        if expected is None:
            problems.append(
                f"{r['notebook']} {r['key']} [{r['profile']}]: {got}, "
                "but expectations.yml records no outcome"
            )
        elif expected != got:
            problems.append(
                f"{r['notebook']} {r['key']} [{r['profile']}]: {got}, expected {expected}"
            )
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
        "The claims and their references are those of {cite:t}`wu2024role` "
        "and {cite:t}`naitsaada2025gap`.",
        "",
        "| outcome | notebook | claim | paper | measured | expected | profile |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in ordered:
        why = expectations.get(r["notebook"], {}).get(r["key"], {}).get("why", "")
        mark = "reproduced" if r["passed"] else f"**not reproduced**{': ' + why if why else ''}"
        link = f"[{r['notebook']}]({r['notebook']}.ipynb)"
        cells = [
            mark,
            link,
            f"{r['claim']} (`{r['key']}`)",
            r["paper_ref"],
            r["measured"],
            r["expected"],
            r["profile"],
        ]
        lines.append(
            "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
        )
    return "\n".join(lines) + "\n"


def summary_markdown(records: list[dict], expectations: dict) -> str:
    """A few lines for the intro page: how many verdicts reproduced, and which did
    not, with why.
    """
    if not records:
        return "No notebook has been executed yet: run `collapse book` to fill this in.\n"
    failed = [r for r in records if not r["passed"]]
    profiles = ", ".join(sorted({r["profile"] for r in records}))
    lines = [
        f"In this build (profile {profiles}), "
        f"**{len(records) - len(failed)} of {len(records)} verdicts reproduced**; "
        f"the {{doc}}`scoreboard </book/executed/scoreboard>` lists every one."
    ]
    if failed:
        lines += ["", "Not reproduced:", ""]
        for r in failed:
            why = (
                expectations.get(r["notebook"], {})
                .get(r["key"], {})
                .get("why", "see the notebook")
            )
            lines.append(
                f"- {r['claim']} ({r['paper_ref']}; {{doc}}`/book/executed/{r['notebook']}`): "
                f"measured {r['measured']}. {why}"
            )
    return "\n".join(lines) + "\n"
