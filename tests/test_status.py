"""The status page: one row per chapter, read from the executed notebooks' metadata."""

import json

from collapse.book import status


def test_each_chapter_shows_its_profile_time_digest_and_verdicts(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "book" / "executed").mkdir(parents=True)
    for name, title in (("01-x", "First"), ("02-y", "Second")):
        (tmp_path / "notebooks" / f"{name}.md").write_text(f"# {title}\n")
    (tmp_path / "_toc.yml").write_text(
        "root: book/intro\nparts:\n  - caption: P\n    chapters:\n"
        "      - file: book/executed/01-x\n      - file: book/executed/02-y\n"
    )
    meta = {"profile": "fast", "seconds": 12.4, "hash": "ab" * 32}
    meta["finished"] = "2026-12-01T15:00:00Z"
    (tmp_path / "book" / "executed" / "01-x.ipynb").write_text(
        json.dumps({"metadata": {"collapse": meta}, "cells": []})
    )
    records = [
        {"notebook": "01-x", "key": "a", "kind": "claim", "passed": True},
        {"notebook": "01-x", "key": "b", "kind": "claim", "passed": False},
        {"notebook": "01-x", "key": "c", "kind": "sanity", "passed": True},
    ]
    status.write_status(tmp_path, records)
    page = (tmp_path / "book" / "executed" / "status.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| [")]
    assert rows == [
        "| [1. First](01-x.ipynb) | fast | 2026-12-01 15:00:00 | 12 | `abababababab` "
        "| claim 1/2, sanity 1/1 |",
        "| [2. Second](02-y.ipynb) | not run | – | – | – | – |",
    ]
    assert f"library digest `{status.library_digest()[:12]}`" in page
