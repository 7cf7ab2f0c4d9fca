"""The verdict records of executed notebooks: collected, checked against expectations.yml,
counted by kind and outcome, and written as the scoreboard page, the intro's tables and its
overview figure."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import yaml

from ..report import KINDS, METADATA_KEY, OUTCOMES, outcome

__all__ = [
    "records_from_notebook",
    "check_expectations",
    "counts",
    "counts_text",
    "Chapter",
    "chapters",
    "short_reason",
    "table_cell",
    "badge",
    "scoreboard_markdown",
    "summary_markdown",
    "overview_figure",
    "write_pages",
]

# How each kind is named on the scoreboard, in the order shown.
_HEADINGS = {
    "claim": "Claims of the papers",
    "analogue": "Claims run on a stand-in",
    "sanity": "Sanity checks of our own code",
}
# Not reproduced first, then inconclusive: what a reader should see first.
_ORDER = {"not-reproduced": 0, "inconclusive": 1, "reproduced": 2}
_BADGES = {
    "reproduced": ("success", "reproduced"),
    "not-reproduced": ("danger", "not reproduced"),
    "inconclusive": ("warning", "inconclusive"),
}
_KIND_BADGES = {"analogue": "on a stand-in", "sanity": "sanity check"}
# The colours of the outcomes in the overview figure (Okabe-Ito, as the chapters' figures).
_COLOURS = {"reproduced": "#009E73", "not-reproduced": "#D55E00", "inconclusive": "#E69F00"}


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


def _tally_sentence(tally: Counter) -> str:
    total = sum(tally.values())
    rest = [f"{tally[o]} {o.replace('-', ' ')}" for o in OUTCOMES[1:] if tally[o]]
    return f"{tally['reproduced']} of {total} reproduced" + (
        f" ({', '.join(rest)})" if rest else ""
    )


def badge(result: str) -> str:
    """An outcome as a sphinx-design badge: coloured text, no emoji (not every reader has an
    emoji font)."""
    colour, text = _BADGES[result]
    return f"{{bdg-{colour}}}`{text}`"


def kind_badge(record: dict) -> str:
    """' {bdg-secondary-line}`sanity check`' for a sanity check or a stand-in, else ''."""
    label = _KIND_BADGES.get(_kind(record))
    return f" {{bdg-secondary-line}}`{label}`" if label else ""


def _entry(record: dict, expectations: dict) -> dict:
    return expectations.get(record["notebook"], {}).get(record["key"], {})


def short_reason(record: dict, expectations: dict) -> str:
    """One line on why a verdict came out as it did: what a reproduced verdict was held to,
    else the `short` reason recorded in expectations.yml (its `why` when there is none)."""
    if outcome(record) == "reproduced":
        return f"Held to: {record['expected']}"
    entry = _entry(record, expectations)
    return entry.get("short") or entry.get("why") or "See the chapter's verdict."


def table_cell(text: str) -> str:
    """Text for one cell of a Markdown table: a pipe escaped, on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


class Chapter:
    """A chapter of the book: its notebook name, number, title and the part (paper) it is in."""

    def __init__(self, name: str, title: str, part: str):
        self.name, self.title, self.part = name, title, part
        self.number = int(name[:2])

    def link(self) -> str:
        """A link to the chapter from a page in book/executed/."""
        return f"{self.name}.ipynb"


def chapters(root: Path) -> list[Chapter]:
    """The chapters in table-of-contents order, with the caption of their part and the title
    of their notebook."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    found = []
    for part in toc.get("parts", []):
        for entry in part.get("chapters", []):
            match = re.fullmatch(r"book/executed/(\d\d-[\w-]+)", entry.get("file", ""))
            if match:
                source = (root / "notebooks" / f"{match.group(1)}.md").read_text()
                title = next(
                    (line[2:].strip() for line in source.splitlines() if line.startswith("# ")),
                    match.group(1),
                )
                found.append(Chapter(match.group(1), title, part.get("caption", "")))
    return found


def _by_chapter(records: list[dict], book: list[Chapter]) -> list[tuple[Chapter, list[dict]]]:
    return [(c, [r for r in records if r["notebook"] == c.name]) for c in book]


def _profiles(records: list[dict]) -> str:
    return ", ".join(sorted({r["profile"] for r in records})) or "none"


def scoreboard_markdown(records: list[dict], expectations: dict, book: list[Chapter]) -> str:
    """The scoreboard page: an overview of every chapter's outcomes, then every verdict
    under its paper and chapter, with its badge, a one-line reason and, folded, what was
    measured and why."""
    table = counts(records)
    lines = [
        "# Scoreboard",
        "",
        f"Every verdict computed by the executed notebooks (profile {_profiles(records)}), "
        "under the paper and the chapter it belongs to; within a chapter, verdicts that did not "
        "reproduce come first. A badge says what a verdict tested ({ref}`methods-verdicts`): "
        "unmarked, a claim of the paper; *on a stand-in*, a claim run on a model or corpus "
        "other than the paper's; *sanity check*, an identity of our own code, never counted as "
        "a reproduced claim. The claims are those of {cite:t}`wu2024role` and "
        "{cite:t}`naitsaada2025gap`.",
        "",
        "::::{container} scoreboard-overview",
        "| Chapter | Verdicts | Reproduced | Not reproduced | Inconclusive |",
        "|---|---:|---:|---:|---:|",
    ]
    for chapter, group in _by_chapter(records, book):
        tally = Counter(outcome(r) for r in group)
        lines.append(
            f"| [{chapter.number}. {table_cell(chapter.title)}]({chapter.link()}) "
            f"| {len(group)} | " + " | ".join(str(tally[o]) for o in OUTCOMES) + " |"
        )
    total = Counter(outcome(r) for r in records)
    lines += [
        f"| **All chapters** | **{len(records)}** | "
        + " | ".join(f"**{total[o]}**" for o in OUTCOMES)
        + " |",
        "::::",
        "",
    ]
    for kind, heading in _HEADINGS.items():
        if sum(table[kind].values()):
            lines.append(f"- {heading}: {_tally_sentence(table[kind])}.")
    part = None
    for chapter, group in _by_chapter(records, book):
        if not group:
            continue
        if chapter.part != part:
            part = chapter.part
            lines += ["", f"## {part}"]
        lines += ["", f"### {chapter.number}. {chapter.title}", ""]
        for r in sorted(group, key=lambda r: _ORDER[outcome(r)]):
            lines += _verdict_block(r, expectations, chapter)
    return "\n".join(lines) + "\n"


def _verdict_block(record: dict, expectations: dict, chapter: Chapter) -> list[str]:
    why = _entry(record, expectations).get("why", "")
    details = [f"Measured: {record['measured']}", "", f"Expected: {record['expected']}"]
    if why and outcome(record) != "reproduced":
        details += ["", f"Why: {why}"]
    return [
        "::::{container} scoreboard-verdict",
        f"{badge(outcome(record))}{kind_badge(record)} "
        f"[{table_cell(record['claim'])}](#verdict-{record['key']}) "
        f"({record['paper_ref']}; `{record['key']}`)",
        "",
        short_reason(record, expectations),
        "",
        ":::{dropdown} What was measured" + (" and why" if len(details) > 3 else ""),
        *details,
        ":::",
        "::::",
        "",
    ]


def summary_markdown(records: list[dict], expectations: dict, book: list[Chapter]) -> str:
    """The intro's summary: the counts per kind, the overview figure, and one table per paper
    with each chapter's claim, outcome, reason and link."""
    if not records:
        return "No notebook has been executed yet: run `collapse book` to fill this in.\n"
    table = counts(records)
    lines = [
        f"In this build (profile {_profiles(records)}) the chapters compute "
        f"{len(records)} verdicts; the {{doc}}`scoreboard </book/executed/scoreboard>` lists "
        "each one with what was measured.",
        "",
    ]
    for kind, heading in _HEADINGS.items():
        if sum(table[kind].values()):
            lines.append(f"- **{heading}**: {_tally_sentence(table[kind])}.")
    lines += [
        "",
        "```{figure} executed/overview.png",
        ":name: fig-overview",
        ":width: 660px",
        ":alt: One bar per chapter, split into its reproduced, not reproduced and inconclusive"
        " verdicts.",
        "",
        "Every chapter's verdicts by outcome, grouped by paper; sanity checks of our own code "
        "are left out. Green: reproduced; vermilion: not reproduced; orange: inconclusive.",
        "```",
    ]
    part = None
    for chapter, group in _by_chapter(records, book):
        if chapter.part != part:
            part = chapter.part
            lines += [
                "",
                f"**{part}**",
                "",
                "| Chapter | Outcome and reason |",
                "|---|---|",
            ]
        lines.append(_chapter_row(chapter, group, expectations))
    return "\n".join(lines) + "\n"


def _chapter_row(chapter: Chapter, group: list[dict], expectations: dict) -> str:
    """A chapter in one row: its claims' overall outcome and the first reason a claim failed."""
    claims = [r for r in group if _kind(r) != "sanity"]
    tally = Counter(outcome(r) for r in claims)
    link = (
        f"{{doc}}`{chapter.number}. {table_cell(chapter.title)} </book/executed/{chapter.name}>`"
    )
    if not claims:
        return f"| {link} | Not run yet: `collapse book` computes its verdicts. |"
    if tally["reproduced"] == len(claims):
        result, reason = badge("reproduced"), f"all {len(claims)} verdicts."
    else:
        first = min(
            (r for r in claims if outcome(r) != "reproduced"), key=lambda r: _ORDER[outcome(r)]
        )
        result = (
            badge(outcome(first))
            if tally["reproduced"] == 0
            else f"{{bdg-warning-line}}`{tally['reproduced']} of {len(claims)} reproduced`"
        )
        reason = f"{first['claim']}: {short_reason(first, expectations)}"
    return f"| {link} | {result} {table_cell(reason)} |"


def overview_figure(records: list[dict], book: list[Chapter], path: Path) -> None:
    """Horizontal bars, one per chapter, of its claim verdicts by outcome, written to `path`
    (PNG, drawn at the book's page width)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(c, [r for r in g if _kind(r) != "sanity"]) for c, g in _by_chapter(records, book)]
    fig, ax = plt.subplots(figsize=(6.6, 0.42 * len(rows) + 1.0), dpi=100)
    y = list(range(len(rows)))[::-1]
    left = [0] * len(rows)
    for result in OUTCOMES:
        widths = [sum(outcome(r) == result for r in g) for _, g in rows]
        ax.barh(y, widths, left=left, color=_COLOURS[result], label=result.replace("-", " "))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(y, [_label_lines(f"{c.number}. {c.title}") for c, _ in rows], fontsize=8.5)
    ax.set_xlabel("verdicts (claims and stand-ins)", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=9, loc="lower right")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}")
    fig.savefig(tmp, format="png", dpi=200)
    plt.close(fig)
    tmp.replace(path)


def _label_lines(title: str, width: int = 44) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(title, width))


def write_pages(root: Path, records: list[dict], expectations: dict) -> None:
    """scoreboard.md, summary.md (included by the intro) and overview.png in book/executed/."""
    executed = root / "book" / "executed"
    executed.mkdir(parents=True, exist_ok=True)
    book = chapters(root)
    for name, text in (
        ("scoreboard.md", scoreboard_markdown(records, expectations, book)),
        ("summary.md", summary_markdown(records, expectations, book)),
    ):
        tmp = executed / f".{name}"
        tmp.write_text(text)
        tmp.replace(executed / name)
    overview_figure(records, book, executed / "overview.png")
