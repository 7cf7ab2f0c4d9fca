"""Sphinx extension: a chapter is numbered by its notebook's own number, everywhere.

The table of contents groups the chapters by paper, in parts that Sphinx numbers each from 1:
it would call 12-spectral-gap chapter 1; readers, the `collapse` command and the file names
all say 12. After Sphinx numbers the sections, each chapter's leading number
is replaced by the one in its file name (book/executed/NN-name), before figures, theorems and
exercises are numbered from it: Fig. 12.3 is the third figure of chapter 12.
"""

from __future__ import annotations

import re

from docutils import nodes
from sphinx.environment.collectors.toctree import TocTreeCollector

_CHAPTER = re.compile(r"(?:^|/)(\d\d)-[^/]+$")


def _renumber(number, chapter: int):
    return None if not number else type(number)([chapter, *list(number)[1:]])


def renumber_chapters(env) -> None:
    """Replace the leading section number of every numbered chapter by its file's number."""
    for docname, secnums in env.toc_secnumbers.items():
        match = _CHAPTER.search(docname)
        if not match or not secnums:
            continue
        chapter = int(match.group(1))
        for anchor, number in secnums.items():
            secnums[anchor] = _renumber(number, chapter)
        for reference in env.tocs[docname].findall(nodes.reference):
            if reference.get("secnumber"):
                reference["secnumber"] = _renumber(reference["secnumber"], chapter)
        title = env.titles.get(docname)
        if title is not None and title.get("secnumber"):
            title["secnumber"] = _renumber(title["secnumber"], chapter)


def _wrap(collector: type) -> None:
    assign = collector.__dict__.get("assign_section_numbers")
    if assign is None or getattr(assign, "renumbers_chapters", False):
        return

    def assign_section_numbers(self, env):
        changed = assign(self, env)
        renumber_chapters(env)
        return changed

    assign_section_numbers.renumbers_chapters = True
    collector.assign_section_numbers = assign_section_numbers


def _wrap_numbering(app) -> None:
    """builder-inited: wrap the section numbering of every toctree collector in place, once
    every extension has set up (sphinx-external-toc numbers the sections again in its own
    collector, after Sphinx's). Renumbering twice gives the same numbers."""
    pending = [TocTreeCollector]
    while pending:
        collector = pending.pop()
        _wrap(collector)
        pending += collector.__subclasses__()


def setup(app) -> dict:
    app.connect("builder-inited", _wrap_numbering)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
