"""Counts of the chapters' code: what a reader scrolls past and what should live in the library.

Run as a script for the table (``python tests/chapter_code.py``); tests/test_notebook_code.py
holds the chapters to it.
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
    """The chapter's code cells as (source lines without blanks, tags)."""
    cells = jupytext.read(path).cells
    return [
        ([line for line in cell.source.splitlines() if line.strip()],
         cell.metadata.get("tags", []))
        for cell in cells
        if cell.cell_type == "code"
    ]


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
    total = hidden = longest = 0
    longest_at = ""
    long_functions = []
    defined = defaultdict(set)
    for path in chapters:
        for source, tags in code_cells(path):
            total += len(source)
            if any(tag in HIDDEN for tag in tags):
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
        "long_functions": sorted(long_functions),
        "shared_helpers": shared,
        "longest_cell": (longest, longest_at),
    }


if __name__ == "__main__":
    counts = stats()
    print(f"code lines (non-blank):            {counts['code_lines']}")
    print(f"  in hidden cells:                 {counts['hidden_code_lines']}")
    print(f"functions over {LONG_FUNCTION} lines:           {len(counts['long_functions'])}")
    for chapter, name, size in counts["long_functions"]:
        print(f"    {chapter} {name}: {size}")
    print(f"helpers defined in >1 chapter:     {len(counts['shared_helpers'])}")
    for name, where in sorted(counts["shared_helpers"].items()):
        print(f"    {name}: {', '.join(where)}")
    size, where = counts["longest_cell"]
    print(f"longest cell:                      {size} lines ({where})")
