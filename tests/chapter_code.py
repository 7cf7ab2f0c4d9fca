"""Counts of the chapters' code: what a reader scrolls past and what should live in the library.

Run as a script for the table (``python tests/chapter_code.py``); tests/test_notebook_code.py
holds the chapters to it. The Verdicts sections' code is counted apart from the hidden
machinery: it states each test and is folded under the verdict the book draws with its quote.
"""

import ast
from collections import defaultdict
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.md"))
HIDDEN = ("hide-input", "hide-cell", "remove-input", "remove-cell")
LONG_FUNCTION = 10


def code_cells(path):
    """The chapter's code cells as (source lines without blanks, tags, the ``##`` section)."""
    found, section = [], ""
    for cell in jupytext.read(path).cells:
        if cell.cell_type == "markdown":
            headings = [line for line in cell.source.splitlines() if line.startswith("## ")]
            section = headings[-1][3:].strip() if headings else section
        elif cell.cell_type == "code":
            source = [line for line in cell.source.splitlines() if line.strip()]
            found.append((source, cell.metadata.get("tags", []), section))
    return found


def functions(source):
    """(name, non-blank body lines) of every function a cell defines (IPython magics dropped)."""
    text = "\n".join(line for line in source if not line.lstrip().startswith(("%", "!")))
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = lines[node.lineno - 1 : node.end_lineno]
            found.append((node.name, sum(1 for line in body if line.strip())))
    return found


def stats(chapters=CHAPTERS):
    """Totals over the chapters and the names defined in more than one."""
    total = hidden = verdicts = longest = 0
    longest_at = ""
    long_functions, unfolded_verdicts = [], []
    defined = defaultdict(set)
    for path in chapters:
        for source, tags, section in code_cells(path):
            total += len(source)
            if section == "Verdicts":
                verdicts += len(source)
                if not any(tag in HIDDEN for tag in tags):
                    unfolded_verdicts.append(f"{path.stem}: {source[0]}")
            elif any(tag in HIDDEN for tag in tags):
                hidden += len(source)
            if len(source) > longest:
                longest, longest_at = len(source), path.stem
            for name, size in functions(source):
                defined[name].add(path.stem)
                if size > LONG_FUNCTION:
                    long_functions.append((path.stem, name, size))
    shared = {name: sorted(where) for name, where in defined.items() if len(where) > 1}
    return {
        "code_lines": total,
        "hidden_code_lines": hidden,
        "verdict_code_lines": verdicts,
        "unfolded_verdict_cells": unfolded_verdicts,
        "long_functions": sorted(long_functions),
        "shared_helpers": shared,
        "longest_cell": (longest, longest_at),
    }


if __name__ == "__main__":
    counts = stats()
    print(f"code lines (non-blank):            {counts['code_lines']}")
    print(f"  in hidden cells (machinery):     {counts['hidden_code_lines']}")
    print(f"  in the Verdicts sections:        {counts['verdict_code_lines']}")
    print(f"functions over {LONG_FUNCTION} lines:           {len(counts['long_functions'])}")
    for chapter, name, size in counts["long_functions"]:
        print(f"    {chapter} {name}: {size}")
    print(f"helpers defined in >1 chapter:     {len(counts['shared_helpers'])}")
    for name, where in sorted(counts["shared_helpers"].items()):
        print(f"    {name}: {', '.join(where)}")
    size, where = counts["longest_cell"]
    print(f"longest cell:                      {size} lines ({where})")
