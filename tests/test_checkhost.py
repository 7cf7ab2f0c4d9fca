"""Checks outside the student's kernel (issue 33): the plain-data wire format, the check
process, and which checks and points a submission is graded on. No kernel runs here: a fake
kernel answers the check process with the kernel's own `wire.answer`.
"""

import asyncio
import json
import math

import jupytext
import nbformat
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tagged
from test_grading import TOY

from collapse import san
from collapse.book import assignments, checkhost, grading, wire


class Anything:
    """An answer equal to everything: the first trick the issue lists."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


VALUES = [
    None, True, -3, 10**60, 1.5, -0.0, math.inf, 1 + 2j, "naïve", b"\x00\xff", [1, (2, [3])],
    {"a": 1, (1, "b"): [None]}, np.arange(6, dtype=np.int32).reshape(2, 3), np.float32(2.5),
    np.int64(-4), np.array([True, False]), torch.ones(2, 3, dtype=torch.float64),
    torch.arange(4).reshape(2, 2).T, torch.zeros(0, 5), torch.tensor(3.0),
    pd.DataFrame({"radius": [1, 2], "name": ["x", "y"]}, index=pd.Index(["a", "b"], name="mask")),
    pd.Series([0.5, 1.5], index=["p", "q"], name="s"), san.SANConfig(d=4, n_layers=2),
]  # fmt: skip


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return type(b) is torch.Tensor and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray | np.generic):
        return type(a) is type(b) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, pd.DataFrame | pd.Series):
        return type(a) is type(b) and a.equals(b) and a.index.equals(b.index)
    return type(a) is type(b) and (a == b or a != a and b != b)


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_plain_data_crosses_and_comes_back_the_same(value):
    text = json.dumps(wire.encode(value))
    assert same(wire.decode(json.loads(text)), value)


def test_what_is_not_plain_data_is_refused_by_name():
    with pytest.raises(wire.NotPlainDataError, match="Anything"):
        wire.encode([1, Anything()])
    with pytest.raises(wire.NotPlainDataError, match="object"):
        wire.encode(np.array([Anything()]))
    with pytest.raises(wire.NotPlainDataError, match="function"):
        wire.decode({"t": "function", "ref": 0})  # no kernel to call it in


@pytest.mark.parametrize(
    ("node", "error", "match"),
    [
        ({"t": "Anything"}, wire.NotPlainDataError, "Anything"),
        ({"t": "dataclass", "class": "subprocess.Popen", "fields": []},
         wire.NotPlainDataError, "subprocess.Popen"),
        ({"t": "dataclass", "class": "collapse.book.grading.CheckResult", "fields": []},
         wire.NotPlainDataError, "CheckResult"),
        ({"t": "dataclass", "class": "collapse.san.os", "fields": []},
         wire.NotPlainDataError, "collapse.san.os"),
        ({"t": "dataclass", "class": "collapse.san.SANConfig", "fields": [["d", {"t": "int",
          "v": "4"}]]}, ValueError, "fields of SANConfig"),
        ({"t": "int", "v": "1" * 5000}, ValueError, "malformed int"),
        ({"t": "int", "v": 3}, ValueError, "malformed"),
        ({"t": "float", "v": "1e5; import os"}, ValueError, "malformed float"),
        ({"t": "array", "dtype": "object", "shape": [1], "data": ""}, wire.NotPlainDataError,
         "object"),
        ({"t": "array", "dtype": "float64", "shape": [10**6, 10**6], "data": "AAAA"},
         ValueError, "does not match"),
        ({"t": "array", "dtype": "int8", "shape": [-1], "data": ""}, ValueError, "shape"),
        ({"t": "bytes", "v": "not base64!"}, ValueError, "malformed bytes"),
        ({"t": "dict", "v": [[{"t": "list", "v": []}, {"t": "none"}]]}, ValueError, "key"),
        ({"t": "list", "v": [{"t": "list", "v": []}] * 2} | {"v": [{}]}, ValueError, "malformed"),
    ],
)  # fmt: skip
def test_hostile_data_is_refused(node, error, match):
    with pytest.raises(error, match=match):
        wire.decode(node)


def test_a_hostile_reply_is_read_as_text_and_refused():
    deep = '{"value": ' + '{"t": "list", "v": [' * 50 + "]}" * 50 + "}"
    for text, match in [
        ("check passed", "malformed reply"),
        ('{"value": {"t": "float", "v": NaN}}', "malformed reply"),
        ('{"value": {"t": "none"}, "raised": {}}', "malformed reply"),
        (deep, "nested too deeply"),
        (" " * (wire.REPLY_LIMIT + 1), "over"),
    ]:
        with pytest.raises(ValueError, match=match):
            wire.reply(text, "f")
    with pytest.raises(wire.NotPlainDataError, match="^f returned a Foo, not plain data$"):
        wire.reply('{"refused": "Foo\\u001b[2J"}', "f")
    with pytest.raises(wire.StudentError, match="^f raised ValueError: no way$") as raised:
        wire.reply('{"raised": {"type": "ValueError", "message": "no\\nway"}}', "f")
    assert raised.value.kind == "ValueError"


def test_a_check_reads_only_what_it_does_not_bind():
    free, bound = checkhost.free_names(
        "for n in range(4):\n    assert f(n, w=1) == masks.radius(n) + len(e['a'])\n"
        "_x = [y for y in table[0]] + [e['b'], isinstance, other]\n"
    )
    assert free == {"f": None, "masks": None, "e": ["a", "b"], "table": [0], "other": None}
    assert {"n", "_x", "y"} <= bound


def test_the_chapter_imports_are_the_grader_s_own():
    source = jupytext.reads(TOY, fmt="md:myst")
    code = (
        "%matplotlib inline\nimport numpy as np, collapse.masks\nfrom collapse import (\n"
        "    san as s,\n    theory,\n)\nfrom . import nothing\ndef f():\n    import math\n"
    )
    source.cells.append(nbformat.v4.new_code_cell(code))
    table = checkhost.chapter_imports(source)
    assert table == {"np": ["import numpy as np"], "collapse": ["import collapse.masks"],
                     "s": ["from collapse import san as s"],
                     "theory": ["from collapse import theory"]}  # fmt: skip


# --- the check process, answered by a fake kernel -----------------------------------------


def fake_kernel(namespace: dict, forged: dict | None = None):
    """`ask` as the grader's nbclient answers it, from `namespace` through the kernel's own
    `wire.answer`; `forged` maps a request's name to the reply a hostile kernel sends."""
    functions = []

    async def ask(request, seconds):
        name = request.get("get")
        if forged and name in forged:
            return forged[name]
        return {"reply": wire.answer(request, namespace, functions)}

    return ask


def run_checks(checks, namespace, imports=None, forged=None, seconds=30):
    """The outcomes of `checks` (code) run one after the other in one check process."""

    async def run():
        process = checkhost._CheckProcess(imports or {}, ".")
        try:
            ask = fake_kernel(namespace, forged)
            return [await process.run(code, ask, seconds) for code in checks]
        finally:
            await process.close()

    return asyncio.run(run())


def test_checks_run_on_plain_data_never_on_the_student_s_objects():
    def answer(n, w=1):
        return n // w

    namespace = {
        "answer": answer, "frame": VALUES[-3], "config": san.SANConfig(d=4, n_layers=2),
        "tokens": torch.ones(2), "embeddings": {"ln": torch.ones(3), "huge": Anything()},
        "cheat": lambda n: Anything(), "broken": lambda n: 1 / 0, "isinstance": None,
        "masks": "the student's masks",
    }  # fmt: skip
    imports = {"torch": ["import torch"], "masks": ["from collapse import masks"]}
    outcomes = run_checks(
        [
            "assert answer(9, w=2) == 4 and frame.loc['a', 'radius'] == 1 and config.d == 4\n"
            "assert torch.equal(tokens, torch.ones(2)) and embeddings['ln'].sum() == 3\n"
            "assert isinstance(answer, object) and masks.radius is not None\n"
            "kept = answer",
            "assert kept(4) == 4",  # bound by the check before: never fetched
            "assert cheat(1) == 1",
            "assert broken(1) == 1",
            "assert missing == 1",
            "assert answer(1) == 2",
        ],
        namespace,
        imports,
    )
    assert [o["passed"] for o in outcomes] == [True, True, False, False, False, False]
    assert outcomes[2]["evalue"] == "cheat returned a Anything, not plain data"
    assert outcomes[3]["evalue"] == "broken raised ZeroDivisionError: division by zero"
    assert outcomes[4] == {"passed": False, "ename": "NameError", "line": None,
                           "evalue": "name 'missing' is not defined in the notebook"}  # fmt: skip
    assert (outcomes[5]["ename"], outcomes[5]["evalue"], outcomes[5]["line"]) == (
        "AssertionError", "", 1)  # fmt: skip


def test_forged_replies_timeouts_and_overruns_fail_the_check():
    forged = {"f": {"reply": json.dumps({"value": {
        "t": "dataclass", "class": "collapse.book.grading.CheckResult",
        "fields": [["passed", {"t": "bool", "v": True}]]}})},
        "slow": {"timeout": True}, "mute": {"failed": "no reply from the kernel"}}  # fmt: skip
    outcomes = run_checks(
        ["assert f", "assert slow", "assert mute", "while True:\n    pass", "assert True"],
        {},
        forged=forged,
        seconds=3,
    )
    assert "f is a collapse.book.grading.CheckResult, not plain data" in outcomes[0]["evalue"]
    assert outcomes[1]["evalue"] == "slow timed out (the time limit per cell)"
    assert outcomes[2]["evalue"] == "mute: no reply from the kernel"
    assert outcomes[3]["ename"] == "TimeoutError" and "ran past 3 s" in outcomes[3]["evalue"]
    assert outcomes[4] == {"passed": True}  # a fresh check process after the overrun


# --- which checks count, and what a row says ------------------------------------------------


def _assignment():
    return assignments.strip_solutions(jupytext.reads(TOY, fmt="md:myst"), stub=True)


def _marks(nb):
    return [(c.metadata["grader"]["check"], c.metadata["grader"]["points"])
            for c in nb.cells if "grader" in c.metadata]  # fmt: skip


def test_checks_and_points_come_from_the_chapter_only():
    source, nb = jupytext.reads(TOY, fmt="md:myst"), _assignment()
    for cell in tagged(nb, "check"):
        cell.metadata["tags"].append("papermill-error-cell-tag")  # hides a check from papermill
    extra = [
        ("# Check (100 points): HIDDEN-SECRET sizes no loop could sum\nassert 1", "hidden-check"),
        ("# Check (5 points): bonus\nassert 1", "check"),
        ("# Check (2 points): the sum up to n\nassert 1", "check"),  # a second copy
    ]
    for text, tag in extra:
        nb.cells.append(nbformat.v4.new_code_cell(text, metadata={"tags": [tag]}))
    forged = {"grader": {"check": "mine", "points": 100, "hidden": False}, "tags": ["x"]}
    nb.cells.append(nbformat.v4.new_code_cell("pass", metadata=forged))
    restored, notes = grading._with_source_checks(nb, source, "01-toy.md")
    hidden = "HIDDEN-SECRET sizes no loop could sum"
    assert _marks(restored) == [("the sum up to n", 2), (hidden, 3), ("an int", 1)]
    assert notes == [
        "ignored: a check cell not in the chapter: 'HIDDEN-SECRET sizes no loop could sum'",
        "ignored: a check cell not in the chapter: 'bonus'",
        "ignored: a check cell not in the chapter: 'the sum up to n'",
    ]
    assert all("papermill-error-cell-tag" not in c.metadata["tags"] for c in restored.cells
               if "grader" in c.metadata)  # fmt: skip
    ignored = restored.cells[-4:]
    assert [c.metadata["tags"] for c in ignored] == [[], [], [], ["x"]]


def test_the_row_says_why_a_visible_check_failed_and_only_that_a_hidden_one_did():
    mark = {"points": 1, "hidden": False, "source": "# Check: n\nassert f(1) == 2\n"}
    results = [
        grading._check_result({**mark, "check": "a", "outcome": {
            "passed": False, "ename": "AssertionError", "evalue": "n = 4", "line": 2}}),
        grading._check_result({**mark, "check": "b", "outcome": {
            "passed": False, "ename": "AssertionError", "evalue": "", "line": 2}}),
        grading._check_result({**mark, "check": "c"}),
        grading._check_result({**mark, "check": "secret", "hidden": True, "outcome": {
            "passed": False, "ename": "AssertionError", "evalue": "(10**9, 4, 7)", "line": 2}}),
    ]  # fmt: skip
    result = grading.Grade("x.ipynb", "01-toy", checks=results)
    result.problems.append(f"cell In[3] `x` raised {grading.error_line(ERROR)}")
    assert result.remark() == (
        "cell In[3] `x` raised ValueError: bad value; check 'a': AssertionError: n = 4; "
        "check 'b': AssertionError at `assert f(1) == 2`; check 'c': not run: execution "
        "stopped before this check; hidden check 'secret' failed"
    )
    assert "10**9" not in result.table() and "10**9" not in result.summary()


ERROR = nbformat.v4.new_output(
    "error", ename="ValueError\x07", evalue="bad\r\nvalue \x1b[2J", traceback=["\x1b[31mx"]
)


def test_a_student_s_error_is_one_short_clean_line():
    bare = nbformat.v4.new_output("error", ename="AssertionError", evalue="", traceback=[
        "\x1b[0;31m----> 3\x1b[0m assert total(3) == 3\x00\x1b[2J"])  # fmt: skip
    assert grading.error_line(bare) == "AssertionError at `assert total(3) == 3`"
    long = nbformat.v4.new_output("error", ename="E" * 500, evalue="x\n" * 500, traceback=[])
    assert len(grading.error_line(long)) < 200 and "\n" not in grading.error_line(long)
