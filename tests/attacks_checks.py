"""Attacks on the grader's checks (issue 33, items 1, 2 and 4): graded submissions of chapter
01's assignment, as data.

`ATTACKS` are submissions for a graded class: `{name: (answer, edit)}` as
`test_grading.answered` takes them (the answer replaces the stub, None keeps it; `edit(nb)`
changes the notebook). None of them answers the exercise: each tries to score anyway, from
inside the kernel (an answer equal to everything, silenced tracebacks, rewritten `run_cell`,
shadowed builtins, a forged reply), from the notebook (check cells of its own, tags that hide
the real ones, a forged grader mark), or to read the hidden check. `check_rows(rows)` lists
what went wrong in their gradebook rows: every one must score 0 of 5 and say why.
This module is light (no torch): a grader's worker process may import it.
"""

import re

import nbformat

CHAPTER = "01-mask-radius"
HIDDEN_NAME = "the closed form at 10^7 to 10^9 tokens, where no mask can be built"
# text of the hidden check's code, never its name: none of it may reach a kernel or a row
HIDDEN_TEXT = ("_hc_", "10**9 + 1", "-(-(")
FIRST_CHECK = "symmetric windows agree with masks.radius"

WRONG = "def window_radius(n, w, causal):\n    return 0\n"

_ALWAYS_EQUAL = """\
class Anything:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


def window_radius(n, w, causal):
    return Anything()
"""

_INT_EQUAL = """\
class Sly(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def window_radius(n, w, causal):
    return Sly(0)
"""

_RUN_CELL = (
    """\
shell = get_ipython()
plain, plain_async = shell.run_cell, shell.run_cell_async


def blank(cell):
    return "pass" if "Check" in cell or "collapse" in cell else cell


shell.run_cell = lambda cell, *a, **k: plain(blank(cell), *a, **k)
shell.run_cell_async = lambda cell, *a, **k: plain_async(blank(cell), *a, **k)
"""
    + WRONG
)

_BUILTINS = (
    """\
AssertionError = type("AssertionError", (Warning,), {})
isinstance = lambda *args: True
abs = all = lambda *args: True
"""
    + WRONG
)

# The student's function finds the request's nonce on the stack, prints a reply of its own and
# escapes before the kernel's helper can print the real one: the check process reads a
# "passed" CheckResult of the grader's own tooling, which is not plain data.
_FORGED = """\
import json, re, sys


class Escape(BaseException):
    pass


def window_radius(n, w, causal):
    frame, nonce = sys._getframe(1), "0" * 32
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, str) and re.fullmatch("[0-9a-f]{32}", value):
                nonce = value
        frame = frame.f_back
    passed = {"t": "bool", "v": True}
    forged = {"value": {"t": "dataclass", "class": "collapse.book.grading.CheckResult",
                        "fields": [["passed", passed]]}}
    print("check passed")
    print(f"\\n{nonce}{json.dumps(forged)}{nonce}\\n")
    raise Escape
"""

# Logs every input the kernel runs (the grader's requests included) for the last cell.
_SPY = (
    """\
seen = []
get_ipython().events.register("pre_run_cell", lambda info: seen.append(info.raw_cell))
"""
    + WRONG
)

_LEAK = """\
marks = ["_h" + "c_", "10**9 " + "+ 1", "-(" + "-("]
text = "\\n".join([*seen, *In[:-1], *map(str, globals())])
found = [m for m in marks if m in text]
asked = sum(("collapse.book." + "wire") in s for s in seen)
raise RuntimeError(f"hidden text in the kernel: {found or 'none'}; {asked} grader requests seen")
"""


def _added(source: str, tags=(), metadata=None):
    """An edit that appends a code cell with `tags` and `metadata`."""

    def edit(nb):
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata.update({"tags": list(tags), **(metadata or {})})
        nb.cells.append(cell)

    return edit


# the mark the grader puts on its own check cells, with a passed outcome
_FORGED_MARK = {
    "grader": {"check": "bonus", "points": 100, "hidden": False, "outcome": {"passed": True}}
}


def _error_tagged(nb):
    for cell in nb.cells:
        if "check" in cell.metadata.get("tags", []):
            cell.metadata["tags"].append("papermill-error-cell-tag")


ATTACKS = {
    # an answer equal to everything, as an object and as an int
    "cheat_always_equal": (_ALWAYS_EQUAL, None),
    "cheat_int_equal": (_INT_EQUAL, None),
    # failed checks made silent in the kernel
    "cheat_showtraceback": ("get_ipython().showtraceback = lambda *a, **k: None\n" + WRONG, None),
    "cheat_custom_exc": (
        "get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)\n" + WRONG,
        None,
    ),
    # every cell that looks like a check (or a request of the grader) becomes `pass`
    "cheat_run_cell": (_RUN_CELL, None),
    "cheat_builtins": (_BUILTINS, None),
    "cheat_forged_reply": (_FORGED, None),
    # checks and points of the student's own
    "cheat_self_awarded": (
        None,
        _added(f"# Check (100 points): {HIDDEN_NAME}\nassert True", ["hidden-check"]),
    ),
    "cheat_bonus": (None, _added("# Check (5 points): bonus\nassert True", ["check"])),
    "cheat_forged_mark": (None, _added("assert True", [], _FORGED_MARK)),
    "cheat_error_tag": (None, _error_tagged),
    # look for the hidden check's code in everything the kernel runs, and report it
    "cheat_hidden_code": (_SPY, _added(_LEAK)),
}

# What each row's error column must say (a regular expression), beyond scoring 0 of 5.
_SAYS = {
    "cheat_always_equal": r"window_radius returned a Anything, not plain data",
    "cheat_int_equal": rf"check '{FIRST_CHECK}': AssertionError: n = 4, w = 1",
    "cheat_showtraceback": rf"check '{FIRST_CHECK}': AssertionError: n = 4, w = 1",
    "cheat_custom_exc": rf"check '{FIRST_CHECK}': AssertionError: n = 4, w = 1",
    "cheat_run_cell": rf"check '{FIRST_CHECK}': RuntimeError: window_radius: no reply",
    "cheat_builtins": rf"check '{FIRST_CHECK}': AssertionError: n = 4, w = 1",
    "cheat_forged_reply": r"returned a collapse\.book\.grading\.CheckResult, not plain data",
    "cheat_self_awarded": rf"ignored: a check cell not in the chapter: '{re.escape(HIDDEN_NAME)}'",
    "cheat_bonus": r"ignored: a check cell not in the chapter: 'bonus'",
    "cheat_forged_mark": rf"check '{FIRST_CHECK}'",
    "cheat_error_tag": r"is not answered yet",
    "cheat_hidden_code": r"hidden text in the kernel: none; [1-9]\d* grader requests seen",
}


def check_rows(rows: dict) -> list[str]:
    """What went wrong in a graded class holding `ATTACKS` (rows by file stem, as
    test_grading.read_csv gives them): a row missing, scoring, out of other than 5 points,
    not saying why, or quoting the hidden check's code; and any column that is not one of
    chapter 01's checks. -> one line per fault (none: the checks held)."""
    faults = []
    for name in ATTACKS:
        row = rows.get(name)
        if row is None:
            faults.append(f"{name}: no row")
            continue
        if (row["total"], row["max"]) != ("0", "5"):
            faults.append(f"{name}: {row['total']}/{row['max']} points: {row['error']}")
        if not re.search(_SAYS[name], row["error"]):
            faults.append(f"{name}: the row does not say {_SAYS[name]!r}: {row['error']}")
    for name, row in rows.items():
        leaked = [text for text in HIDDEN_TEXT if text in " ".join(map(str, row.values()))]
        if leaked:
            faults.append(f"{name}: the row quotes the hidden check's code {leaked}")
    columns = {c for row in rows.values() for c in row}
    extra = [c for c in sorted(columns) if "100 pt" in c or c.startswith("bonus")]
    return faults + [f"a column not in the chapter: {c}" for c in extra]
