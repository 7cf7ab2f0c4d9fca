"""One-off migration: verdict keys without the codes of an internal brief.

Before, keys carried codes such as `w1-`, `m4-` or `m8-`, which match neither the chapters'
numbers nor their names. After, a key is a name within its chapter (`every-mask-collapses`),
and a verdict's name across the book is the chapter's slug and that key
(`mask-radius/every-mask-collapses`). This script renames the keys in
notebooks/expectations.yml and in the chapters' verdict calls; run it once from the
repository root, then delete it.
"""

import re
from pathlib import Path

CODE = re.compile(r"\b[wm][0-9]{1,2}-(?=[a-z{])")
NOTEBOOKS = Path("notebooks")


def rename_expectations(path: Path) -> int:
    lines = path.read_text().splitlines(keepends=True)
    renamed = 0
    for i, line in enumerate(lines):
        match = re.match(r"^(  )([wm][0-9]{1,2}-)([a-z0-9-]+:.*)$", line, flags=re.S)
        if match:
            lines[i] = match.group(1) + match.group(3)
            renamed += 1
    path.write_text("".join(lines))
    return renamed


def rename_chapter(path: Path) -> int:
    """The key argument of every verdict call: a string or f-string right after the call."""
    text = path.read_text()
    call = re.compile(r"(report\.(?:verdict|check)\(\s*f?\")([wm][0-9]{1,2}-)")
    text, renamed = call.subn(r"\1", text)
    path.write_text(text)
    return renamed


if __name__ == "__main__":
    print("expectations.yml:", rename_expectations(NOTEBOOKS / "expectations.yml"), "keys")
    for chapter in sorted(NOTEBOOKS.glob("[0-9][0-9]-*.md")):
        print(f"{chapter.name}:", rename_chapter(chapter), "keys")
