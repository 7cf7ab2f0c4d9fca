"""Each notebook, executed in the fast profile (by the session's book build), with every
verdict outcome as notebooks/expectations.yml records it. Its time budget is a benchmark
(benchmarks/notebook_times.py), never an assertion: a busy machine must not fail a test."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collapse import report
from collapse.book import pages, runner, scoreboard

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]-*.md"))
REASONS = {"why", "short", "whose"}  # an entry's reasons, beside its outcome per profile
EXPECTATIONS = yaml.safe_load((ROOT / "notebooks" / "expectations.yml").read_text()) or {}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_fast_profile_verdicts_match_expectations(fast_book, name):
    root, result = fast_book
    executed = root / "book" / "executed" / f"{name}.ipynb"
    assert executed.is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    meta = json.loads(executed.read_text())["metadata"]["collapse"]
    assert meta["profile"] == "fast"
    records = json.loads(executed.with_suffix(".verdicts.json").read_text())
    assert records, f"{name} recorded no verdict"
    for record in records:
        expected = EXPECTATIONS.get(name, {}).get(record["key"], {}).get("fast")
        got = report.outcome(record)
        assert got == expected, (
            f"{name} {record['key']}: {got} (measured {record['measured']}), expectations.yml "
            f"says {expected}"
        )


def test_the_fast_book_ran_without_network(fast_book):
    """Every notebook, the pretrained ones included, executes and builds with no network at all."""
    root, result = fast_book
    if result.args[0] != "unshare":
        pytest.skip(
            "SKIPPED LOUDLY: `unshare -n` is not permitted here, so the offline run is unproven "
            "on this machine"
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert all((root / "book" / "executed" / f"{name}.ipynb").is_file() for name in NOTEBOOKS)


def test_every_expectation_names_a_notebook_and_explains_failures():
    for name, verdicts in EXPECTATIONS.items():
        assert name in NOTEBOOKS, f"expectations.yml names unknown notebook {name}"
        for key, outcomes in verdicts.items():
            assert set(outcomes) <= set(runner.PROFILES) | REASONS, (
                f"{name} {key}: unknown entries {set(outcomes)}"
            )
            outcomes_seen = {v for k, v in outcomes.items() if k not in REASONS}
            assert outcomes_seen <= set(report.OUTCOMES), f"{name} {key}: {outcomes_seen}"
            if outcomes_seen - {"reproduced"}:
                assert outcomes.get("why") and outcomes.get("short"), (
                    f"{name} {key} is not reproduced somewhere but gives no why and short"
                )
                short = outcomes["short"]
                assert len(short) <= 160 and "|" not in short and "\n" not in short.strip(), (
                    f"{name} {key}: the short reason must be one line of at most 160 characters"
                )
                assert not pages.ascii_math(short), (name, key, pages.ascii_math(short))
            if "whose" in outcomes:
                assert outcomes["whose"] in scoreboard.WHOSE, (name, key, outcomes["whose"])


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_fast_pages_show_no_raw_artefacts(fast_book, name):
    """What the page would show, read from the executed notebook: no warning, path, repr, long
    float, timing, NaN, stderr, pandas HTML table, over-wide figure, ASCII math or emoji."""
    import nbformat

    root, _ = fast_book
    notebook = nbformat.read(str(root / "book" / "executed" / f"{name}.ipynb"), as_version=4)
    found = pages.artefacts(notebook)
    assert not found, "\n".join(found)


def test_book_parameters_are_the_parameters_cell():
    profiles = runner.Project(ROOT).profiles()
    assert not profiles.get("book"), "the book profile lives in each notebook's parameters cell"
    for profile in ("fast", "paper"):
        for name in profiles.get(profile) or {}:
            assert name in NOTEBOOKS, f"profiles.yml [{profile}] names unknown notebook {name}"


@pytest.mark.execution
def test_a_claim_broken_on_purpose_fails_its_verdict(tmp_path):
    """Five layers cannot bring log mu down by 20 nats: chapter 04's collapse verdict must fail,
    and `verdicts` must say so."""
    from conftest import copy_sources

    root = copy_sources(tmp_path)
    command = [sys.executable, "-m", "collapse", "--root", str(root)]
    run = subprocess.run(
        [*command, "run", "layernorm-orthogonal", "--profile", "fast", "--set", "n_layers=5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    records = {r["key"]: r for r in runner.collect_records(runner.Project(root))}
    assert records["collapse-nonnegative"]["passed"] is False
    verdicts = subprocess.run([*command, "verdicts"], capture_output=True, text=True)
    assert verdicts.returncode == 1
    assert "collapse-nonnegative [fast]: not-reproduced, expected reproduced" in verdicts.stderr


def test_every_verdict_rerun_with_other_seeds_held_in_every_family():
    """notebooks/reseed.yml (written by `collapse reseed`): every chapter was rerun in the fast
    profile, every verdict it names is a verdict of expectations.yml with the outcome written
    there, and none changed its outcome with the seeds (one that does must be decided on more
    seeds or be inconclusive)."""
    recorded = yaml.safe_load((ROOT / "notebooks" / "reseed.yml").read_text())
    assert set(recorded["fast"]["chapters"]) == set(NOTEBOOKS)
    for profile, entry in recorded.items():
        assert entry["families"] >= 3, profile
        for name, chapter in entry["chapters"].items():
            assert not chapter.get("failed"), (profile, name, chapter["failed"])
            assert len(chapter["runs"]) == entry["families"], (profile, name)
            for key, counts in chapter["verdicts"].items():
                assert key in EXPECTATIONS[name], f"reseed.yml names {name} {key}, now gone"
                assert len(counts) == 1, f"{profile} {name} {key} differs by seeds: {counts}"
                assert sum(counts.values()) == entry["families"], (profile, name, key)
                expected = EXPECTATIONS[name][key].get(profile)
                assert set(counts) == {expected}, (
                    f"{profile} {name} {key}: reseed.yml saw {counts}, expectations.yml says "
                    f"{expected}"
                )
