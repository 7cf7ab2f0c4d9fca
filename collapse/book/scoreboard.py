"""The verdict records of executed notebooks: collected, checked against expectations.yml,
counted by kind and outcome, and written as the scoreboard page, the intro's tables and its
overview figure.

What is counted is a verdict record: a claim tested at several masks, sizes or depths is one
record, whose cases are its rows. Claims and analogues are the papers' sentences; extensions
(our own questions) and sanity checks (identities of our code) are counted apart and never
for or against a paper.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import yaml

from .. import sources
from ..atomic import atomic_path
from ..report import KINDS, METADATA_KEY, OUTCOMES, outcome

__all__ = [
    "records_from_notebook",
    "check_expectations",
    "counts",
    "counts_text",
    "held",
    "tally_sentence",
    "WHOSE",
    "Chapter",
    "chapters",
    "anchor",
    "short_reason",
    "quote_markdown",
    "table_cell",
    "badge",
    "kind_badge",
    "scoreboard_markdown",
    "summary_markdown",
    "overview_figure",
    "write_pages",
]

# How each kind is named where it is counted, in the order shown.
_HEADINGS = {
    "claim": "Claims of the papers",
    "analogue": "Claims run on a stand-in",
    "extension": "Extensions: our own questions",
    "sanity": "Sanity checks of our own code",
}
_PAPER_KINDS = ("claim", "analogue")
# Not reproduced first, then inconclusive: what a reader should see first.
_ORDER = {"not-reproduced": 0, "inconclusive": 1, "reproduced": 2}
_BADGES = {
    "reproduced": ("success", "reproduced"),
    "not-reproduced": ("danger", "not reproduced"),
    "inconclusive": ("warning", "inconclusive"),
}
_KIND_BADGES = {"analogue": "on a stand-in", "extension": "extension", "sanity": "sanity check"}
# For a claim that is not reproduced, expectations.yml says whose failure it is (`whose`).
WHOSE = {
    "paper": "Against the paper: its sentence does not hold in the closest setting we run.",
    "setting": (
        "Our setting departs from the paper's where the paper is silent (see why); not "
        "settled against the paper."
    ),
    "profile": "This profile's reduced size, not the paper: the book profile reproduces it.",
    "stand-in": "About the stand-in, not the paper's checkpoint.",
}
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


def _entry(record: dict, expectations: dict) -> dict:
    return expectations.get(record["notebook"], {}).get(record["key"], {})


def check_expectations(records: list[dict], expectations: dict) -> list[str]:
    """Lines describing every record whose outcome differs from expectations.yml, and every
    paper's claim that is not reproduced without saying whose failure it is (empty: all
    match).

    expectations: {notebook: {verdict key: {profile: outcome, "why", "short", "whose"}}}.
    """
    problems = []
    for r in records:
        entry = _entry(r, expectations)
        expected, got = entry.get(r["profile"]), outcome(r)
        where = f"{r['notebook']} {r['key']} [{r['profile']}]"
        if expected is None:
            problems.append(f"{where}: {got}, but expectations.yml records no outcome")
        elif expected != got:
            problems.append(f"{where}: {got}, expected {expected}")
        elif _needs_whose(r) and entry.get("whose") not in WHOSE:
            problems.append(
                f"{where}: a claim not reproduced needs `whose` in expectations.yml, one of "
                + ", ".join(WHOSE)
            )
    return problems


def _needs_whose(record: dict) -> bool:
    return outcome(record) == "not-reproduced" and record["kind"] in _PAPER_KINDS


def counts(records: list[dict]) -> dict[str, Counter]:
    """{kind: Counter(outcome -> number of records)} for every kind, in KINDS order."""
    table = {kind: Counter() for kind in KINDS}
    for r in records:
        table[r["kind"]][outcome(r)] += 1
    return table


def _noun(kind: str, n: int) -> str:
    singular = {"claim": "claim", "analogue": "analogue", "extension": "extension"}
    word = singular.get(kind, "sanity check")
    return word if n == 1 else word + "s"


def counts_text(records: list[dict]) -> list[str]:
    """One plain line per kind: 'claim: 30 claims (24 reproduced, 4 not-reproduced, ...),
    52 rows'. A claim tested at several settings counts once; its rows are counted beside."""
    lines = []
    for kind, tally in counts(records).items():
        total = sum(tally.values())
        rows = sum(max(len(r["rows"]), 1) for r in records if r["kind"] == kind)
        parts = ", ".join(f"{tally[o]} {o}" for o in OUTCOMES if tally[o]) or "none run"
        lines.append(f"{kind}: {total} {_noun(kind, total)} ({parts}), {rows} rows")
    return lines


def held(reseeded: dict, record: dict) -> tuple[int, int] | None:
    """(k, K): in how many of the K seed families the verdict had this record's outcome
    (notebooks/reseed.yml at the record's profile); None when it was not rerun."""
    profile = reseeded.get(record["profile"], {}) or {}
    chapter = profile.get("chapters", {}).get(record["notebook"], {})
    tally = chapter.get("verdicts", {}).get(record["key"])
    if not tally:
        return None
    return tally.get(outcome(record), 0), sum(tally.values())


def _held_text(reseeded: dict, record: dict) -> str:
    found = held(reseeded, record)
    if found is None:
        return ""
    k, total = found
    return f"Held in {k} of {total} seed families."


def tally_sentence(tally: Counter, kind: str) -> str:
    """'3 of 4 claims reproduced (1 not reproduced)': how the intro and the scoreboard say a
    kind's count."""
    total = sum(tally.values())
    rest = [f"{tally[o]} {o.replace('-', ' ')}" for o in OUTCOMES[1:] if tally[o]]
    return f"{tally['reproduced']} of {total} {_noun(kind, total)} reproduced" + (
        f" ({', '.join(rest)})" if rest else ""
    )


def badge(result: str) -> str:
    """An outcome as a sphinx-design badge: coloured text, no emoji (not every reader has an
    emoji font)."""
    colour, text = _BADGES[result]
    return f"{{bdg-{colour}}}`{text}`"


def kind_badge(record: dict) -> str:
    """' {bdg-secondary-line}`extension`' for any kind but a claim, else ''."""
    label = _KIND_BADGES.get(record["kind"])
    return f" {{bdg-secondary-line}}`{label}`" if label else ""


def anchor(record: dict) -> str:
    """The label of a verdict on its chapter's page, unique in the book."""
    return "verdict-" + f"{record['notebook'][3:]}-{record['key']}"


def _citation(record: dict) -> str:
    """'{cite:t}`wu2024role`, abstract' from the record's source."""
    cite, _, where = record["source"].partition(", ")
    return f"{{cite:t}}`{cite}`, {where}"


def quote_markdown(record: dict) -> str:
    """The quoted sentence a claim tests, as a Markdown block quote with its citation ('' for
    a record that quotes none)."""
    if not record.get("quote"):
        return ""
    lead = "Goes beyond: " if record["kind"] == "extension" else ""
    words, source = record["quote"], sources.registered(record["quote"])
    if source and source.gist:
        words = words.replace(source.gist, f"**{source.gist}**", 1)
    return f"> {lead}“{words}” ({_citation(record)})\n"


def _first_line(text: str, width: int = sources.GIST_WIDTH) -> str:
    """The first sentence of `text`, for words no longer registered (a record from an older
    version); one longer than `width` characters keeps its opening and its close, with an
    ellipsis between (cut at words).
    """
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z“])", text, maxsplit=1)[0]
    if len(sentence) <= width:
        return sentence
    head = sentence[: width * 2 // 5].rsplit(" ", 1)[0]
    tail = sentence[-(width * 3 // 5) :].split(" ", 1)[-1]
    return f"{head} … {tail}"


def short_reason(record: dict, expectations: dict) -> str:
    """One line on why a verdict came out as it did: what a reproduced verdict was held to,
    else whose failure it is and the `short` reason recorded in expectations.yml."""
    if outcome(record) == "reproduced":
        return f"Held to: {record['expected']}"
    entry = _entry(record, expectations)
    reason = entry.get("short") or entry.get("why") or "See the chapter's verdict."
    whose = WHOSE.get(entry.get("whose", "")) if record["kind"] in _PAPER_KINDS else None
    return f"{whose} {reason}" if whose and outcome(record) == "not-reproduced" else reason


def table_cell(text: str) -> str:
    """Text for one cell of a Markdown table: a pipe escaped, on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def glance_claim(record: dict) -> str:
    """A verdict's cell in a chapter's at-a-glance table: its claim, linking to the verdict,
    and the words it tests of the quoted sentence, with their paper (where in the paper is
    told under the verdict)."""
    cell = f"[{table_cell(record['claim'])}](#{anchor(record)})"
    if record.get("quote"):
        source = sources.registered(record["quote"])
        words = table_cell(source.excerpt if source else _first_line(record["quote"]))
        cite = record["source"].partition(", ")[0]
        cell += f"<br>*“{words}”* ({{cite:t}}`{cite}`)"
    return cell


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


def _rows_line(record: dict) -> str:
    """'Rows: complete not reproduced; causal reproduced.' for a verdict with several cases."""
    cases = "; ".join(f"{case} {result.replace('-', ' ')}" for case, result in record["rows"])
    return f"Rows: {cases}." if cases else ""


def scoreboard_markdown(
    records: list[dict], expectations: dict, book: list[Chapter], reseeded: dict | None = None
) -> str:
    """The scoreboard page: per chapter, how many claims, extensions and sanity checks came
    out which way; then the claims of each paper (not reproduced first), each with the
    sentence it tests, a one-line reason and, folded, what was measured; then the extensions
    and the sanity checks, each in a section of its own."""
    reseeded = reseeded or {}
    lines = [
        "# Scoreboard",
        "",
        f"Every verdict computed by the executed notebooks (profile {_profiles(records)}). "
        "What is counted is a verdict: a claim tested at several masks, sizes or depths counts "
        "once, with its cases as rows beneath. A verdict has a kind ({ref}`methods-verdicts`): "
        "a *claim* tests a sentence of {cite:t}`wu2024role` or {cite:t}`naitsaada2025gap`, "
        "quoted under it; an *analogue* tests one on a stand-in model or corpus; an "
        "*extension* asks our own question beyond the papers and is never counted for or "
        "against them; a *sanity check* guards our code. Where the chapters were rerun with "
        "other families of seeds, each verdict says in how many it held.",
        "",
        "::::{container} scoreboard-overview",
        "| Chapter | Claims | Reproduced | Not reproduced | Inconclusive | Extensions "
        "| Sanity checks |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for chapter, group in _by_chapter(records, book):
        claims = [r for r in group if r["kind"] in _PAPER_KINDS]
        tally = Counter(outcome(r) for r in claims)
        others = Counter(r["kind"] for r in group)
        lines.append(
            f"| [{chapter.number}. {table_cell(chapter.title)}]({chapter.link()}) "
            f"| {len(claims)} | "
            + " | ".join(str(tally[o]) for o in OUTCOMES)
            + f" | {others['extension']} | {others['sanity']} |"
        )
    claims = [r for r in records if r["kind"] in _PAPER_KINDS]
    total = Counter(outcome(r) for r in claims)
    others = Counter(r["kind"] for r in records)
    lines += [
        f"| **All chapters** | **{len(claims)}** | "
        + " | ".join(f"**{total[o]}**" for o in OUTCOMES)
        + f" | **{others['extension']}** | **{others['sanity']}** |",
        "::::",
        "",
    ]
    table = counts(records)
    for kind, heading in _HEADINGS.items():
        if sum(table[kind].values()):
            lines.append(f"- {heading}: {tally_sentence(table[kind], kind)}.")
    lines += _claims_sections(records, expectations, book, reseeded)
    for kind in ("extension", "sanity"):
        mine = [r for r in records if r["kind"] == kind]
        if mine:
            lines += ["", f"## {_HEADINGS[kind]}", ""]
            lines.append(
                "Our own questions beyond the papers: a stronger reading, our derivation or "
                "another model family. Their outcomes say nothing for or against a paper."
                if kind == "extension"
                else "Identities that hold by construction of our code: they guard it and "
                "are never counted as reproduced claims."
            )
            lines += _chapter_blocks(mine, expectations, book, reseeded, level="###")
    return "\n".join(lines) + "\n"


def _claims_sections(records, expectations, book, reseeded) -> list[str]:
    """The papers' claims, under the paper (the part of the book) and the chapter."""
    lines, part = [], None
    for chapter, group in _by_chapter(records, book):
        claims = [r for r in group if r["kind"] in _PAPER_KINDS]
        if not claims:
            continue
        if chapter.part != part:
            part = chapter.part
            lines += ["", f"## {part}"]
        lines += ["", f"### {chapter.number}. {chapter.title}", ""]
        for r in sorted(claims, key=lambda r: _ORDER[outcome(r)]):
            lines += _verdict_block(r, expectations, chapter, reseeded)
    return lines


def _chapter_blocks(records, expectations, book, reseeded, level: str) -> list[str]:
    lines = []
    for chapter, group in _by_chapter(records, book):
        if group:
            lines += ["", f"{level} {chapter.number}. {chapter.title}", ""]
            for r in sorted(group, key=lambda r: _ORDER[outcome(r)]):
                lines += _verdict_block(r, expectations, chapter, reseeded)
    return lines


def _verdict_block(record: dict, expectations: dict, chapter: Chapter, reseeded) -> list[str]:
    why = _entry(record, expectations).get("why", "")
    details = [f"Measured: {record['measured']}", "", f"Expected: {record['expected']}"]
    if why and outcome(record) != "reproduced":
        details += ["", f"Why: {why}"]
    after = " ".join(x for x in (_rows_line(record), _held_text(reseeded, record)) if x)
    return [
        "::::{container} scoreboard-verdict",
        f"{badge(outcome(record))}{kind_badge(record)} "
        f"[{table_cell(record['claim'])}](#{anchor(record)}) "
        f"(`{record['id']}`)",
        "",
        *([quote_markdown(record)] if record.get("quote") else []),
        short_reason(record, expectations),
        *(["", after] if after else []),
        "",
        ":::{dropdown} What was measured" + (" and why" if len(details) > 3 else ""),
        *details,
        ":::",
        "::::",
        "",
    ]


def summary_markdown(records: list[dict], expectations: dict, book: list[Chapter]) -> str:
    """The intro's summary: the counts per kind, the overview figure, and one table per paper
    with each chapter's claims, outcome, reason and link."""
    if not records:
        return "No notebook has been executed yet: run `collapse book` to fill this in.\n"
    table = counts(records)
    lines = [
        f"In this build (profile {_profiles(records)}) the chapters compute {len(records)} "
        "verdicts. A claim tested at several masks, sizes or depths counts once; extensions "
        "(our own questions) and sanity checks (of our code) are counted apart and never for "
        "or against a paper. The {doc}`scoreboard </book/executed/scoreboard>` lists each one "
        "with the sentence it tests and what was measured.",
        "",
    ]
    for kind, heading in _HEADINGS.items():
        if sum(table[kind].values()):
            lines.append(f"- **{heading}**: {tally_sentence(table[kind], kind)}.")
    lines += [
        "",
        "```{figure} executed/overview.png",
        ":name: fig-overview",
        ":width: 660px",
        ":alt: One bar per chapter, split into its claims that reproduced, did not reproduce"
        " or were inconclusive.",
        "",
        "Every chapter's claims of the papers by outcome, under the paper they test; "
        "extensions and sanity checks are left out. Green: reproduced; vermilion: not "
        "reproduced; orange: inconclusive.",
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
                "| Chapter | Claims: outcome and reason |",
                "|---|---|",
            ]
        lines.append(_chapter_row(chapter, group, expectations))
    return "\n".join(lines) + "\n"


def _chapter_row(chapter: Chapter, group: list[dict], expectations: dict) -> str:
    """A chapter in one row: its claims' overall outcome and the first reason a claim failed."""
    claims = [r for r in group if r["kind"] in _PAPER_KINDS]
    tally = Counter(outcome(r) for r in claims)
    link = (
        f"{{doc}}`{chapter.number}. {table_cell(chapter.title)} </book/executed/{chapter.name}>`"
    )
    extensions = sum(r["kind"] == "extension" for r in group)
    extra = f" ({extensions} {_noun('extension', extensions)} beside.)" if extensions else ""
    if not group:
        return f"| {link} | Not run yet: `collapse book` computes its verdicts. |"
    if not claims:
        return f"| {link} | No claim of the papers is tested here.{extra} |"
    if tally["reproduced"] == len(claims):
        result, reason = badge("reproduced"), f"all {len(claims)} {_noun('claim', len(claims))}."
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
    return f"| {link} | {result} {table_cell(reason)}{extra} |"


def overview_figure(records: list[dict], book: list[Chapter], path: Path) -> None:
    """Horizontal bars, one per chapter, of its claims by outcome, grouped under their paper,
    written to `path` (PNG, drawn at the book's page width); the legend sits above the bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        (c, [r for r in g if r["kind"] in _PAPER_KINDS]) for c, g in _by_chapter(records, book)
    ]
    parts = list(dict.fromkeys(c.part for c, _ in rows))
    # top to bottom: a heading line per paper, then its chapters
    y, at = {}, 0.0
    for part in parts:
        at -= 1.0  # the paper's heading
        for c, _ in rows:
            if c.part == part:
                y[c.name] = at = at - 1.0
        at -= 0.4
    height = 0.42 * (len(rows) + len(parts)) + 1.2
    fig, ax = plt.subplots(figsize=(6.6, height), dpi=100, layout="tight")
    fig.get_layout_engine().set(rect=(0, 0, 1, 1 - 0.35 / height))  # room for the legend
    ys = [y[c.name] for c, _ in rows]
    left = [0] * len(rows)
    for result in OUTCOMES:
        widths = [sum(outcome(r) == result for r in g) for _, g in rows]
        ax.barh(ys, widths, left=left, color=_COLOURS[result], label=result.replace("-", " "))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for (_, g), row in zip(rows, ys, strict=True):
        if not g:
            ax.text(0.05, row, "no claim tested here", va="center", fontsize=8.5, color="0.4")
    for part in parts:
        first = max(y[c.name] for c, _ in rows if c.part == part)
        ax.annotate(part, (0.01, first + 1.0), xycoords=("figure fraction", "data"),
                    va="center", fontsize=9, fontweight="bold")  # fmt: skip
    ax.set_yticks(ys, [_label_lines(f"{c.number}. {c.title}") for c, _ in rows], fontsize=8.5)
    ax.set_ylim(min(ys, default=0.0) - 0.7, 0.2)  # a book of no chapter yet: no bars
    ax.set_xlabel("claims of the papers (and stand-ins)", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    fig.legend(frameon=False, fontsize=9, ncol=3, loc="upper center")
    with atomic_path(path) as partial:
        fig.savefig(partial, format="png", dpi=200)
    plt.close(fig)


def _label_lines(title: str, width: int = 44) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(title, width))


def write_pages(
    root: Path, records: list[dict], expectations: dict, reseeded: dict | None = None
) -> None:
    """scoreboard.md, summary.md (included by the intro) and overview.png in book/executed/."""
    executed = root / "book" / "executed"
    executed.mkdir(parents=True, exist_ok=True)
    book = chapters(root)
    for name, text in (
        ("scoreboard.md", scoreboard_markdown(records, expectations, book, reseeded)),
        ("summary.md", summary_markdown(records, expectations, book)),
    ):
        tmp = executed / f".{name}"
        tmp.write_text(text)
        tmp.replace(executed / name)
    overview_figure(records, book, executed / "overview.png")
