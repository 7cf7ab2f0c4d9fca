"""The status page: what each chapter of this build is, where it came from and how long it
took, read from the executed notebooks' own metadata (`collapse.book.runner` writes it)."""

from __future__ import annotations

import json
import platform
from collections import Counter
from pathlib import Path

from .. import __version__, provenance
from ..atomic import write_atomic
from ..report import KINDS, outcome
from .scoreboard import chapters, table_cell

__all__ = ["library_digest", "status_markdown", "write_status"]


def library_digest() -> str:
    """The digest of every science module and the numeric packages' versions: two builds
    with the same one computed their numbers with the same code."""
    return provenance.digest("library", b"", provenance.science_modules())


def _verdicts(records: list[dict]) -> str:
    parts = []
    for kind in KINDS:
        mine = [r for r in records if r.get("kind", "claim") == kind]
        if mine:
            tally = Counter(outcome(r) for r in mine)
            parts.append(f"{kind} {tally['reproduced']}/{len(mine)}")
    return ", ".join(parts) or "–"


def status_markdown(root: Path, records: list[dict]) -> str:
    """The status page's Markdown: one row per chapter of the table of contents."""
    executed = root / "book" / "executed"
    lines = [
        "# Build status",
        "",
        "What each chapter page of this build is: the parameter profile it ran with, when it "
        "finished (UTC), how long it took, the first characters of its provenance digest (its "
        "source, parameters, the library code it uses and the numeric packages' versions, as "
        "`collapse.provenance` computes it) and its verdicts per kind, "
        "reproduced of run. A chapter is executed again only when that digest changes.",
        "",
        f"- package `collapse` {__version__}; library digest `{library_digest()[:12]}`",
        f"- Python {platform.python_version()}; torch {provenance.package_version('torch')}; "
        f"numpy {provenance.package_version('numpy')}",
        "",
        "| Chapter | Profile | Finished | Seconds | Digest | Verdicts |",
        "|---|---|---|---:|---|---|",
    ]
    for chapter in chapters(root):
        path = executed / f"{chapter.name}.ipynb"
        meta = {}
        if path.is_file():
            meta = json.loads(path.read_text()).get("metadata", {}).get("collapse", {})
        mine = [r for r in records if r["notebook"] == chapter.name]
        cells = [
            f"[{chapter.number}. {table_cell(chapter.title)}]({chapter.link()})",
            meta.get("profile", "not run"),
            meta.get("finished", "–").replace("T", " ").removesuffix("Z"),
            f"{meta['seconds']:.0f}" if "seconds" in meta else "–",
            f"`{meta['hash'][:12]}`" if "hash" in meta else "–",
            _verdicts(mine),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_status(root: Path, records: list[dict]) -> None:
    """book/executed/status.md, written atomically."""
    path = root / "book" / "executed" / "status.md"
    write_atomic(path, status_markdown(root, records))
