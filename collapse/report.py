"""Verdicts: checks computed from a chapter's own data, recorded and shown, never typed in.

A chapter states each verdict once, with `check`: the claim, the sentence of the paper it
tests (`source`, a name in `collapse.sources`), and one or more comparisons built from the
measured numbers and the bound they are held to::

    report.check(
        "sigma1-near-one",
        r"The top singular value of a random Markov matrix is $\\sigma_1 \\approx 1$.",
        report.at_most(r"$\\lvert\\sigma_1 - 1\\rvert$", {"$T = 100$": 0.004}, 0.01),
        kind="claim",
        source="mtg-v1-markov",
    )

The comparison decides the outcome and writes both texts, what was measured and what it
was held to, from the same numbers, so that the two cannot drift apart. A comparison given a
confidence interval decides only when the whole interval lies on one side of the bound
(otherwise the verdict is inconclusive); `requires` states what must hold for the data to
decide at all.

The record travels inside the executed notebook as output metadata (key "collapse_verdict");
the `collapse` command collects the records into book/executed/<notebook>.verdicts.json,
compares their outcomes with notebooks/expectations.yml and lists them on the scoreboard.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .checks import ParameterError
from .sources import quote
from .tables import tex

__all__ = [
    "check",
    "at_most",
    "below",
    "at_least",
    "above",
    "within",
    "near",
    "equal",
    "increasing",
    "requires",
    "Comparison",
    "outcome",
    "OUTCOMES",
    "KINDS",
    "KIND_LABELS",
    "METADATA_KEY",
]

OUTCOMES = ("reproduced", "not-reproduced", "inconclusive")
KINDS = {
    "claim": "a sentence a paper wrote, quoted, tested in its setting or the closest we can run",
    "analogue": "a claim of a paper, quoted, run on a stand-in (another checkpoint or corpus)",
    "extension": (
        "our own question beyond the papers (a stronger reading, our derivation, another "
        "model family): never counted for or against a paper"
    ),
    "sanity": "an identity that holds by construction of our code, not a claim of a paper",
}
# What a verdict line adds after its key, so that each kind reads as what it is.
KIND_LABELS = {
    "claim": "",
    "analogue": " (on a stand-in)",
    "extension": " (extension)",
    "sanity": " (sanity check)",
}
METADATA_KEY = "collapse_verdict"
_KEY = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_QUOTED_KINDS = ("claim", "analogue")


def outcome(record_or_passed) -> str:
    """'reproduced', 'not-reproduced' or 'inconclusive' for a verdict record (or a bool)."""
    if isinstance(record_or_passed, dict):
        if not record_or_passed.get("decided", True):
            return OUTCOMES[2]
        return OUTCOMES[0] if record_or_passed["passed"] else OUTCOMES[1]
    return OUTCOMES[0] if record_or_passed else OUTCOMES[1]


def _number(name: str, value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    return float(value)


def _labelled(name: str, value) -> dict[str, float]:
    """A number, or {label: number}, as {label: float} ('' labels a lone number)."""
    if isinstance(value, Mapping):
        return {str(k): _number(f"{name}[{k!r}]", v) for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    return {"": _number(name, value)}


def _intervals(values: dict, interval) -> dict[str, tuple[float, float]] | None:
    """The confidence interval of each value, keyed as the values, or None."""
    if interval is None:
        return None
    if isinstance(interval, Mapping):
        found = {str(k): v for k, v in interval.items()}
    elif len(values) == 1:
        found = {next(iter(values)): interval}
    else:
        raise ParameterError("interval must map the same labels as the values")
    if set(found) != set(values):
        raise ParameterError(f"interval must give one (low, high) per value: {sorted(values)}")
    pairs = {}
    for label, pair in found.items():
        low, high = (_number(f"interval[{label!r}]", x) for x in pair)
        if not low <= values[label] <= high:
            raise ParameterError(
                f"interval[{label!r}] = [{low:g}, {high:g}] must contain its value "
                f"{values[label]:g}"
            )
        pairs[label] = (low, high)
    return pairs


@dataclass
class Comparison:
    """Measured values held to a bound: whether they meet it, whether the data decide that,
    and both texts, written from the same numbers.

    Build one with `at_most`, `below`, `at_least`, `above`, `within`, `near`, `equal`,
    `increasing` or `requires`.
    """

    quantity: str
    op: str
    values: dict[str, float]
    bounds: tuple[float, ...] = ()
    intervals: dict[str, tuple[float, float]] | None = None
    level: float = 0.95
    spread: dict[str, float] | None = None
    digits: int = 3
    relative: bool = False
    reason: str = ""
    _results: dict[str, tuple[bool, bool]] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.op == "increasing":
            values = list(self.values.values())
            ok = all(a < b for a, b in zip(values, values[1:], strict=False))
            self._results = {"": (ok, len(values) >= 2)}
            return
        for label, value in self.values.items():
            if math.isnan(value):
                self._results[label] = (False, False)
            elif self.intervals is None:
                self._results[label] = (self._meets(value), True)
            else:
                low, high = self.intervals[label]
                ends = [self._meets(low), self._meets(high)]
                middle = self._meets(value)
                self._results[label] = (middle, all(ends) == any(ends) == middle)

    def _meets(self, value: float) -> bool:
        b = self.bounds
        if self.op == "<=":
            return value <= b[0]
        if self.op == "<":
            return value < b[0]
        if self.op == ">=":
            return value >= b[0]
        if self.op == ">":
            return value > b[0]
        if self.op == "==":
            return value == b[0]
        if self.op == "near":
            tol = b[1] * abs(b[0]) if self.relative else b[1]
            return abs(value - b[0]) <= tol
        return b[0] <= value <= b[1]  # "within"

    @property
    def passed(self) -> bool:
        """Every value meets the bound (a comparison without values does not pass)."""
        return bool(self._results) and all(ok for ok, _ in self._results.values())

    @property
    def decided(self) -> bool:
        """The data settle the comparison: some value fails decisively, or all are settled."""
        results = self._results.values()
        if any(not ok and sure for ok, sure in results):
            return True
        return bool(self._results) and all(sure for _, sure in results)

    @property
    def near_threshold(self) -> bool:
        """Some value lies within its own seed-to-seed spread of a bound."""
        if not self.spread or self.op in ("increasing", "requires"):
            return False
        return any(
            min(abs(self.values[label] - b) for b in self._edges()) <= spread
            for label, spread in self.spread.items()
        )

    def _edges(self) -> tuple[float, ...]:
        if self.op == "near":
            tol = self.bounds[1] * abs(self.bounds[0]) if self.relative else self.bounds[1]
            return (self.bounds[0] - tol, self.bounds[0] + tol)
        return self.bounds

    def _value_text(self, label: str) -> str:
        text = f"${tex(self.values[label], self.digits)}$"
        if self.intervals is not None:
            low, high = self.intervals[label]
            text += (
                f" ({round(100 * self.level)} % CI "
                f"$[{tex(low, self.digits)}, {tex(high, self.digits)}]$)"
            )
        return f"{label}: {text}" if label else text

    def measured(self) -> str:
        """What was measured, as Markdown with the numbers in $...$."""
        if self.op == "requires":
            return self.quantity + (": yes" if self.passed else f": no ({self.reason})")
        if not self.values:
            return f"{self.quantity}: no value in this run"
        parts = [self._value_text(label) for label in self.values]
        if list(self.values) == [""]:
            return _joined(self.quantity, parts[0], "=")
        return f"{self.quantity}: " + "; ".join(parts)

    def expected(self) -> str:
        """What the values were held to, written from the bound itself."""
        if self.op == "requires":
            return self.quantity
        if self.op == "increasing":
            return f"{self.quantity} strictly increasing in the order " + ", ".join(
                label for label in self.values
            )
        b = [tex(x, self.digits) for x in self.bounds]
        if self.op == "within":
            condition = f"in $[{b[0]}, {b[1]}]$"
        elif self.op == "near":
            width = f"{tex(100 * self.bounds[1], 3)} %" if self.relative else f"${b[1]}$"
            condition = f"within {width} of ${b[0]}$"
        else:
            sign = {"<=": r"\le", "<": "<", ">=": r"\ge", ">": ">", "==": "="}[self.op]
            condition = f"${sign} {b[0]}$"
        text = _joined(self.quantity, condition)
        if len(self.values) > 1:
            text += " in every case"
        if self.intervals is not None:
            text += (
                f", decided by the {round(100 * self.level)} % confidence interval "
                "(inconclusive while it straddles the bound)"
            )
        return text

    def row_results(self) -> dict[str, tuple[bool, bool]]:
        """(met, settled) for each labelled value: the rows of the verdict."""
        if self.op in ("increasing", "requires") or list(self.values) == [""]:
            return {}
        return dict(self._results)

    def record(self) -> dict:
        """The comparison as JSON-ready data (numbers as floats, NaN as None)."""

        def plain(x):
            return None if isinstance(x, float) and math.isnan(x) else x

        return {
            "quantity": self.quantity,
            "op": self.op,
            "bounds": list(self.bounds),
            # pairs, not a mapping: the records are written with sorted keys, and the order of
            # the cases is part of what was tested (`increasing`)
            "values": [[k, plain(v)] for k, v in self.values.items()],
            "intervals": self.intervals and [[k, *v] for k, v in self.intervals.items()],
            "spread": self.spread,
            "passed": self.passed,
            "decided": self.decided,
            "near_threshold": self.near_threshold,
        }


def _joined(quantity: str, text: str, sign: str = "") -> str:
    """'quantity text', one math span where both are math: '$q$' and '$\\le 2$' give
    '$q \\le 2$'; with `sign`, '$q$' and '$0.9$ (...)' give '$q = 0.9$ (...)', and 'KS' and
    '$0.03$' give 'KS: $0.03$'."""
    if quantity.endswith("$") and not quantity.endswith("$$") and text.startswith("$"):
        return f"{quantity[:-1]} {sign + ' ' if sign else ''}{text[1:]}"
    return f"{quantity}{':' if sign else ''} {text}"


def _comparison(quantity, op, value, bounds, interval, level, spread, digits, relative=False):
    if not isinstance(quantity, str) or not quantity.strip():
        raise ParameterError(f"quantity must name what was measured, got {quantity!r}")
    bounds = tuple(_number("bound", b) for b in bounds)
    values = _labelled("value", value)
    spreads = None if spread is None else _labelled("spread", spread)
    if spreads is not None and list(spreads) == [""] and len(values) > 1:
        spreads = dict.fromkeys(values, spreads[""])
    if spreads is not None and list(spreads) == [""]:
        spreads = {next(iter(values)): spreads[""]}
    return Comparison(
        quantity,
        op,
        values,
        bounds,
        _intervals(values, interval),
        level,
        spreads,
        digits,
        relative,
    )


def at_most(quantity, value, bound, *, interval=None, level=0.95, spread=None, digits=3):
    """`value` (a number or {label: number}) must be <= `bound`.

    quantity: what was measured, as Markdown (math in $...$); interval: the (low, high)
    confidence interval of each value at `level`; spread: each value's seed-to-seed standard
    deviation, which marks a value lying within it of the bound for a rerun on more seeds.
    """
    return _comparison(quantity, "<=", value, (bound,), interval, level, spread, digits)


def below(quantity, value, bound, *, interval=None, level=0.95, spread=None, digits=3):
    """`value` must be < `bound` (see `at_most`)."""
    return _comparison(quantity, "<", value, (bound,), interval, level, spread, digits)


def at_least(quantity, value, bound, *, interval=None, level=0.95, spread=None, digits=3):
    """`value` must be >= `bound` (see `at_most`)."""
    return _comparison(quantity, ">=", value, (bound,), interval, level, spread, digits)


def above(quantity, value, bound, *, interval=None, level=0.95, spread=None, digits=3):
    """`value` must be > `bound` (see `at_most`)."""
    return _comparison(quantity, ">", value, (bound,), interval, level, spread, digits)


def within(quantity, value, low, high, *, interval=None, level=0.95, spread=None, digits=3):
    """`value` must lie in [low, high] (see `at_most`)."""
    if _number("low", low) > _number("high", high):
        raise ParameterError(f"low must be <= high, got [{low}, {high}]")
    return _comparison(quantity, "within", value, (low, high), interval, level, spread, digits)


def near(
    quantity,
    value,
    target,
    tolerance,
    *,
    relative=False,
    interval=None,
    level=0.95,
    spread=None,
    digits=3,
):
    """|value - target| must be <= tolerance (relative: tolerance * |target|)."""
    if _number("tolerance", tolerance) < 0:
        raise ParameterError(f"tolerance must be >= 0, got {tolerance!r}")
    bounds = (target, tolerance)
    return _comparison(
        quantity, "near", value, bounds, interval, level, spread, digits, bool(relative)
    )


def equal(quantity, value, target, *, digits=3):
    """`value` must equal `target` exactly (counts, radii, ranks)."""
    return _comparison(quantity, "==", value, (target,), None, 0.95, None, digits)


def increasing(quantity, values: Mapping, *, digits=3):
    """The values, in the order given ({label: number}), must increase strictly."""
    if not isinstance(values, Mapping):
        raise ParameterError("values must map labels to numbers, in the order to test")
    return _comparison(quantity, "increasing", values, (), None, 0.95, None, digits)


def requires(condition: str, holds, reason: str = "") -> Comparison:
    """What must hold for the data to decide at all (a run long enough to leave a transient,
    say): when it does not, the verdict is inconclusive, and `reason` says why."""
    if not isinstance(holds, (bool, np.bool_)):
        raise ParameterError(
            f"holds must be a bool computed from the data, got {type(holds).__name__}"
        )
    comparison = Comparison(condition, "requires", {}, reason=reason)
    comparison._results = {"": (bool(holds), bool(holds))}
    return comparison


def check(
    key: str,
    claim: str,
    *comparisons: Comparison,
    kind: str,
    source: str | None = None,
    note: str = "",
) -> dict:
    """Decide, record and display one verdict.

    key: a stable name within the chapter (lowercase, digits, dashes), used by
    expectations.yml; claim: what is tested, in one sentence; comparisons: what must hold,
    all of them; kind: one of KINDS; source: for a claim or an analogue, the name of the
    quoted sentence it tests (`collapse.sources.QUOTES`); for an extension, optionally the
    sentence it goes beyond; note: context added to what was measured (sizes, seeds).

    Passed when every comparison holds; decided when some comparison fails decisively or
    all are settled (a `requires` that fails leaves the verdict undecided).
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ParameterError(f"key must be lowercase letters, digits and dashes, got {key!r}")
    if kind not in KINDS:
        raise ParameterError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not comparisons or not all(isinstance(c, Comparison) for c in comparisons):
        raise ParameterError(
            "check needs one or more comparisons (report.at_most, report.within, ...)"
        )
    if kind in _QUOTED_KINDS and source is None:
        raise ParameterError(
            f"a verdict of kind {kind} must quote the sentence it tests: source=<a name in "
            "collapse.sources.QUOTES>"
        )
    if kind == "sanity" and source is not None:
        raise ParameterError("a sanity check tests our own code: it takes no source")
    cited = quote(source) if source is not None else None
    conditions = [c for c in comparisons if c.op == "requires"]
    rows = _rows(comparisons)
    tests = [c for c in comparisons if c.op != "requires"]
    preconditions_hold = all(c.passed for c in conditions)
    failed_decisively = any(not c.passed and c.decided for c in tests)
    measured = "; ".join(c.measured() for c in comparisons)
    record = {
        "key": key,
        "kind": kind,
        "claim": claim,
        "source": cited.reference if cited else "",
        "quote": cited.text if cited else "",
        "measured": f"{note}; {measured}" if note else measured,
        "expected": "; ".join(c.expected() for c in comparisons),
        "passed": all(c.passed for c in comparisons),
        "decided": preconditions_hold and (failed_decisively or all(c.decided for c in tests)),
        "near_threshold": any(c.near_threshold for c in tests),
        "rows": rows,
        "tests": [c.record() for c in comparisons],
    }
    _display(record)
    return record


def _rows(comparisons) -> list[list[str]]:
    """[case, outcome] for each labelled case (a mask, a T, a depth) over every comparison
    that measured it, in order: a claim tested at several settings is one claim with these
    rows (none when there is one case)."""
    found: dict[str, list[tuple[bool, bool]]] = {}
    for comparison in comparisons:
        for label, result in comparison.row_results().items():
            found.setdefault(label, []).append(result)
    rows = []
    for label, results in found.items():
        if any(not ok and sure for ok, sure in results):
            rows.append([label, OUTCOMES[1]])
        elif all(ok and sure for ok, sure in results):
            rows.append([label, OUTCOMES[0]])
        else:
            rows.append([label, OUTCOMES[2]])
    return rows if len(rows) > 1 else []


def _display(record: dict) -> None:
    """The verdict as Markdown (math in `$...$` typesets in Jupyter and in the book, where
    collapse.book.pages redraws it from the record with a badge, an anchor and the quote)."""
    mark = outcome(record).replace("-", " ")
    source = f" ({record['source']})" if record["source"] else ""
    text = (
        f"**Verdict `{record['key']}`{KIND_LABELS[record['kind']]}: {mark}.** "
        f"{record['claim']}{source}  \n"
        f"Measured: {record['measured']}  \nExpected: {record['expected']}"
    )
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:  # plain Python without IPython
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display(Markdown(text), metadata={METADATA_KEY: record})
