"""Do the verdicts hold under other seeds? Chapters rerun with disjoint families of seeds.

`collapse reseed` executes chapters with K families of seeds (`collapse.rng`; family 0 is the
book's own): first the fast profile for every chapter, then the book profile for every
chapter that the fast families did not settle alike (a verdict whose outcome differs between
families, one that is inconclusive, or one with a value within its own seed-to-seed spread of
a bound), or for every chapter. It writes notebooks/reseed.yml: per profile, chapter and
verdict, how many families gave each outcome, with the provenance digest of each run, which
the scoreboard shows as "held in k of K".

Each run is cached by its provenance digest in book/executed/families/<profile>/family-<k>/,
so an interrupted reseed resumes where it stopped; a chapter that raises is reported and the
others go on.
"""

from __future__ import annotations

import copy
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..atomic import atomic_path, write_atomic
from ..checks import ParameterError, check_int
from ..report import OUTCOMES, outcome
from . import runner

__all__ = [
    "RESEED_FILE",
    "Family",
    "family_folder",
    "run_families",
    "unsettled",
    "tally",
    "merge",
    "read",
    "write",
    "summary_lines",
]

RESEED_FILE = "reseed.yml"
_HEADER = (
    "# Written by `collapse reseed`: for each profile, chapter and verdict, how many families\n"
    "# of seeds gave each outcome (family 0 holds the book's own seeds), and the provenance\n"
    "# digest of every family's run. The scoreboard shows it as 'held in k of K'.\n"
)


@dataclass
class Family:
    """One chapter run with one family of seeds: its digest and records, or its error."""

    notebook: str
    family: int
    digest: str = ""
    records: list = field(default_factory=list)
    error: str = ""


def family_folder(project: runner.Project, profile: str, family: int) -> Path:
    """Where a reseed keeps the runs of one profile and family (family 0 included, so that a
    reseed never replaces the book's own results)."""
    return project.executed_dir / "families" / profile / f"family-{family}"


def _reuse_book_run(project, notebook, digest: str, folder: Path) -> None:
    """Copy the book's own run of this notebook into the family-0 folder when it is current
    (same digest): the book's seeds need not run twice."""
    source = project.executed_dir / f"{notebook.name}.ipynb"
    target = folder / source.name
    if target.is_file() or not runner._cached(source, digest):
        return
    folder.mkdir(parents=True, exist_ok=True)
    for path in (source, source.with_suffix(".verdicts.json")):
        with atomic_path(folder / path.name) as partial:
            shutil.copyfile(path, partial)


def run_families(
    project: runner.Project,
    planned,
    profile: str,
    families: int,
    *,
    timeout: int | None = None,
    progress: Callable[[Family], None] = lambda run: None,
) -> dict[str, list[Family]]:
    """Execute every planned (notebook, params) pair with families 0, ..., families - 1 of
    seeds; {notebook: [Family, ...]}. A notebook that raises is recorded with its error."""
    families = check_int("--families", families, minimum=2)
    runs: dict[str, list[Family]] = {}
    for notebook, params in planned:
        for family in range(families):
            digest = runner.content_hash(notebook, params, profile, family)
            folder = family_folder(project, profile, family)
            if family == 0:
                _reuse_book_run(project, notebook, digest, folder)
            run = Family(notebook.name, family, digest)
            try:
                result = runner.execute(
                    project,
                    notebook,
                    params,
                    profile,
                    timeout=timeout,
                    seed_family=family,
                    folder=folder,
                )
                run.records = result.records
            except runner.NotebookError as err:
                run.error = str(err).splitlines()[0]
            runs.setdefault(notebook.name, []).append(run)
            progress(run)
    return runs


def tally(runs: list[Family]) -> dict:
    """One chapter's families as notebooks/reseed.yml stores them: the digest of each run and,
    per verdict, how many families gave each outcome (a failed run gives none)."""
    verdicts: dict[str, Counter] = {}
    for run in runs:
        for record in run.records:
            verdicts.setdefault(record["key"], Counter())[outcome(record)] += 1
    return {
        "runs": {run.family: run.digest for run in runs if not run.error},
        "failed": {run.family: run.error for run in runs if run.error},
        "verdicts": {
            key: {o: counts[o] for o in OUTCOMES if counts[o]} for key, counts in verdicts.items()
        },
    }


def unsettled(runs: dict[str, list[Family]]) -> list[str]:
    """The chapters whose families disagree on a verdict, leave one inconclusive, measure a
    value within its own spread of a bound, or failed: those worth the book profile."""
    chosen = []
    for name, chapter in runs.items():
        counts = tally(chapter)
        if (
            counts["failed"]
            or any(len(c) > 1 or "inconclusive" in c for c in counts["verdicts"].values())
            or any(r.get("near_threshold") for run in chapter for r in run.records)
        ):
            chosen.append(name)
    return chosen


def read(project: runner.Project) -> dict:
    """notebooks/reseed.yml ({} when there is none)."""
    path = project.notebooks_dir / RESEED_FILE
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        raise ParameterError(f"notebooks/{RESEED_FILE} is not valid YAML") from None
    if not isinstance(data, dict):
        raise ParameterError(f"notebooks/{RESEED_FILE} must be a mapping")
    return data


def merge(data: dict, profile: str, families: int, runs: dict[str, list[Family]]) -> dict:
    """`data` (a reseed.yml) with this profile's chapters replaced by `runs`."""
    merged = copy.deepcopy(data)
    entry = merged.setdefault(profile, {})
    entry["families"] = families
    chapters = entry.setdefault("chapters", {})
    for name, chapter in runs.items():
        chapters[name] = tally(chapter)
    entry["chapters"] = dict(sorted(chapters.items()))
    return merged


def write(project: runner.Project, data: dict) -> Path:
    """Write notebooks/reseed.yml atomically."""
    path = project.notebooks_dir / RESEED_FILE
    return write_atomic(path, _HEADER + yaml.safe_dump(data, sort_keys=False, width=99))


def summary_lines(data: dict, profile: str) -> list[str]:
    """What a reseed found at `profile`: how many verdicts held in every family, then each one
    that did not, with its counts, and each failed run."""
    chapters = data.get(profile, {}).get("chapters", {})
    lines, steady, total = [], 0, 0
    for name, chapter in chapters.items():
        for key, counts in chapter.get("verdicts", {}).items():
            total += 1
            if len(counts) == 1:
                steady += 1
            else:
                spread = ", ".join(f"{n} {o}" for o, n in counts.items())
                verdict = runner.verdict_id(name, key)
                lines.append(f"  differs between families: {verdict} ({spread})")
        for family, error in chapter.get("failed", {}).items():
            lines.append(f"  failed: {name} family {family}: {error}")
    families = data.get(profile, {}).get("families", 0)
    return [f"{profile}: {steady} of {total} verdicts held in all {families} families", *lines]
