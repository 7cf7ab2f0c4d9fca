"""The verdict records of executed notebooks: collected, checked against expectations.yml,
counted by kind and outcome, and written as the scoreboard and the intro's summary."""

from __future__ import annotations

from collections import Counter

from ..report import KIND_LABELS, KINDS, METADATA_KEY, OUTCOMES, outcome

__all__ = [
    "records_from_notebook",
    "check_expectations",
    "counts",
    "counts_text",
    "scoreboard_markdown",
    "summary_markdown",
]

# How each kind is headed on the scoreboard, in the order shown.
_HEADINGS = {
    "claim": "Claims of the papers",
    "analogue": "Claims run on a stand-in",
    "sanity": "Sanity checks of our own code",
}
# Not reproduced first, then inconclusive: what a reader should see first.
_ORDER = {"not-reproduced": 0, "inconclusive": 1, "reproduced": 2}


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
        got = outcome(r)
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


def _kind(record: dict) -> str:
    return record.get("kind", "claim")


def counts(records: list[dict]) -> dict[str, Counter]:
    """{kind: Counter(outcome -> number of verdicts)} for every kind, in KINDS order."""
    table = {kind: Counter() for kind in KINDS}
    for r in records:
        table[_kind(r)][outcome(r)] += 1
    return table


def counts_text(records: list[dict]) -> list[str]:
    """One plain line per kind that has verdicts: 'claim: 40 verdicts, 30 reproduced, ...'."""
    lines = []
    for kind, tally in counts(records).items():
        total = sum(tally.values())
        if total:
            parts = ", ".join(f"{tally[o]} {o}" for o in OUTCOMES if tally[o])
            lines.append(f"{kind}: {total} verdicts, {parts}")
    return lines


def _why(record: dict, expectations: dict) -> str:
    return expectations.get(record["notebook"], {}).get(record["key"], {}).get("why", "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _tally_sentence(tally: Counter) -> str:
    total = sum(tally.values())
    rest = [f"{tally[o]} {o.replace('-', ' ')}" for o in OUTCOMES[1:] if tally[o]]
    return f"{tally['reproduced']} of {total} reproduced" + (
        f" ({', '.join(rest)})" if rest else ""
    )


def scoreboard_markdown(records: list[dict], expectations: dict) -> str:
    """The scoreboard page: every verdict grouped by what it tested, failures first."""
    table = counts(records)
    lines = [
        "# Scoreboard",
        "",
        "Every verdict computed by the executed notebooks, grouped by what it tested "
        "(see {ref}`methods-verdicts`). Within a group, claims that did not reproduce come "
        "first, with what we measured and why we think so. The claims and their references "
        "are those of {cite:t}`wu2024role` and {cite:t}`naitsaada2025gap`.",
        "",
    ]
    for kind, heading in _HEADINGS.items():
        if sum(table[kind].values()):
            lines.append(f"- {heading}: {_tally_sentence(table[kind])}.")
    for kind, heading in _HEADINGS.items():
        group = [r for r in records if _kind(r) == kind]
        if not group:
            continue
        group.sort(key=lambda r: (_ORDER[outcome(r)], r["notebook"]))
        lines += [
            "",
            f"## {heading}",
            "",
            f"{KINDS[kind].capitalize()}: {_tally_sentence(table[kind])}.",
            "",
            "| outcome | chapter | claim | measured | expected | why | profile |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in group:
            result = outcome(r)
            mark = "reproduced" if result == "reproduced" else f"**{result.replace('-', ' ')}**"
            cells = [
                mark,
                f"[{r['notebook']}]({r['notebook']}.ipynb#verdicts)",
                f"{r['claim']} ({r['paper_ref']}; `{r['key']}`)",
                r["measured"],
                r["expected"],
                _why(r, expectations),
                r["profile"],
            ]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def summary_markdown(records: list[dict], expectations: dict) -> str:
    """A few lines for the intro page: how many claims reproduced, per kind, and which
    did not, with why.
    """
    if not records:
        return "No notebook has been executed yet: run `collapse book` to fill this in.\n"
    table = counts(records)
    profiles = ", ".join(sorted({r["profile"] for r in records}))
    lines = [
        f"In this build (profile {profiles}), the {{doc}}`scoreboard "
        "</book/executed/scoreboard>` lists every verdict:",
        "",
    ]
    for kind, heading in _HEADINGS.items():
        if sum(table[kind].values()):
            lines.append(f"- **{heading}**: {_tally_sentence(table[kind])}.")
    failed = [r for r in records if outcome(r) != "reproduced"]
    if failed:
        lines += ["", "Not reproduced or inconclusive:", ""]
        for r in sorted(failed, key=lambda r: (_ORDER[outcome(r)], r["notebook"])):
            why = _why(r, expectations) or "see the chapter"
            tag = KIND_LABELS[_kind(r)]
            lines.append(
                f"- {r['claim']}{tag} ({r['paper_ref']}; {{doc}}`/book/executed/{r['notebook']}`"
                f"): {outcome(r).replace('-', ' ')}. {why}"
            )
    return "\n".join(lines) + "\n"
