"""Tables for the page: a DataFrame shown as a Markdown table, with human column names, numbers
to their precision, no index column unless it carries data, and math in any cell.

A Markdown table (not pandas' HTML) is what the book renders like its own text: MathJax
typesets `$...$` in it, the theme gives it a box that scrolls on a phone, and it reads the
same in Jupyter.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = [
    "markdown", "show", "number", "tex", "math_cells", "span", "fraction", "by_mask", "glue_math",
    "words", "glue_md", "glue_each", "sign_tuple", "value_and_interval",
]


def number(value, digits: int = 3) -> str:
    """A number to `digits` significant figures, without a trailing '.0' or 'e+00'; '–' for
    NaN or None, so that a missing value never reads as 'nan'.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        if math.isinf(value):
            return "∞" if value > 0 else "−∞"
        text = f"{value:.{digits}g}"
        if "e" in text:
            mantissa, exponent = text.split("e")
            return f"{mantissa}e{int(exponent)}"
        return text
    return str(value)


def tex(value, digits: int = 3) -> str:
    """A number for inside $...$ math, to `digits` significant figures: 0.0123, 5.21 \\times
    10^{-4}, \\infty."""
    if isinstance(value, numbers.Real) and math.isinf(value):
        return r"\infty" if value > 0 else r"-\infty"
    text = number(value, digits)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    return rf"{mantissa} \times 10^{{{exponent}}}"


def _cell(value, digits: int) -> str:
    text = number(value, digits) if not isinstance(value, str) else value
    return text.replace("|", "\\|").replace("\n", " ")


def _label(column) -> str:
    if isinstance(column, tuple):  # a MultiIndex column: its levels in one header
        return " ".join(str(level) for level in column if str(level))
    return str(column)


def markdown(frame, *, columns: dict | None = None, digits: int = 3, index: bool = False) -> str:
    """`frame` as a Markdown table.

    columns: {column: header} renames (and, when given, selects and orders) the columns;
    index: keep the index as the first column (only when it holds data, e.g. mask names),
    headed by its name.
    """
    frame = frame.reset_index() if index else frame
    if columns:
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise KeyError(f"columns not in the table: {missing}")
        frame = frame[list(columns)]
    headers = [(columns or {}).get(c, _label(c)) for c in frame.columns]
    numeric = [frame[c].dtype.kind in "iufb" for c in frame.columns]
    rule = ["---:" if n else "---" for n in numeric]
    lines = ["| " + " | ".join(h.replace("|", "\\|") for h in headers) + " |"]
    lines.append("|" + "|".join(rule) + "|")
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v, digits) for v in row) + " |")
    return "\n".join(lines)


def show(frame, **kw) -> None:
    """Display `frame` as a Markdown table in a notebook (print it elsewhere)."""
    text = markdown(frame, **kw)
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display(Markdown(text))


def math_cells(values, digits: int = 3) -> list[str]:
    r"""Each number as inline math, `$5.2 \times 10^{-6}$`: a column of small numbers that
    reads as numbers, not as 'e-06'.

    Examples
    --------
    >>> math_cells([5.2e-6, 0.5], 2)
    ['$5.2 \\times 10^{-6}$', '$0.5$']
    """
    return [f"${tex(v, digits)}$" for v in values]


def span(lows, highs, fmt: str | None = None) -> list[str]:
    """Each pair as a range, 'low to high' (by `fmt`, else to 3 significant figures): the
    spread over seeds in one short column instead of two.

    Examples
    --------
    >>> span([1.234, 2], [1.5, 2.25], ".2f")
    ['1.23 to 1.50', '2.00 to 2.25']
    >>> span([0.0012], [3])
    ['0.0012 to 3']
    """
    def text(v):
        return number(v) if fmt is None else format(v, fmt)

    return [f"{text(lo)} to {text(hi)}" for lo, hi in zip(lows, highs, strict=True)]


def fraction(value: float) -> str:
    """A softmax temperature as the text writes it: '1/64' rather than '0.015625', '64'.

    Examples
    --------
    >>> fraction(0.015625), fraction(1.0), fraction(64.0)
    ('1/64', '1', '64')
    """
    return f"1/{1 / value:g}" if value < 1 else f"{value:g}"


def by_mask(rows, masks, *, names=("",)):
    """One row per entry of `rows`, one column per mask (headed by its label): the book's
    table of a number per case and mask.

    Parameters
    ----------
    rows : dict
        {row key: values indexed by mask name (a Series or dict)}; a key is a label, or a
        tuple of labels when `names` has several.
    masks : list of str
        The mask columns, in order; a mask a row lacks is shown as '–'.
    names : sequence of str
        The headers of the key's parts, the table's first columns.

    Returns
    -------
    pandas.DataFrame
        Columns `names`, then the masks' labels; pass it to `show`.

    Examples
    --------
    >>> print(markdown(by_mask({"+LN": {"causal": -2.5}}, ["causal", "sliding_window"],
    ...                        names=["Variant"])))
    | Variant | causal | sliding window |
    |---|---:|---:|
    | +LN | -2.5 | – |
    """
    import pandas as pd

    from . import masks as mask_names

    records = []
    for key, values in rows.items():
        parts = key if isinstance(key, tuple) else (key,)
        cells = pd.Series(values, dtype=float).reindex(masks)
        records.append({**dict(zip(names, parts, strict=True)),
                        **{mask_names.label(m): cells[m] for m in masks}})
    return pd.DataFrame(records)


def glue_math(key: str, value, digits: int = 2, *, signed: bool = False) -> None:
    """Glue `value` as inline math under `key`, for {glue:md}`key:myst` in the text: a
    number that reads as one ($5.2 \\times 10^{-4}$), with a '+' before a positive value
    when `signed`.

    Examples
    --------
    >>> glue_math("slope", 0.00052, signed=True)  # outside a notebook: nothing is shown
    """
    from IPython.display import Markdown
    from myst_nb import glue

    sign = "+" if signed and value > 0 else ""
    glue(key, Markdown(f"${sign}{tex(value, digits)}$"), display=False)


def glue_md(key: str, text: str) -> None:
    r"""Glue Markdown (math included) under `key`, for {glue:md}`key:myst` in the text: prose
    that a chapter builds from its numbers and that MathJax must typeset.

    Examples
    --------
    >>> glue_md("lrs", "$0.01$ and $0.1$")  # outside a notebook: nothing is shown
    """
    from IPython.display import Markdown
    from myst_nb import glue

    glue(key, Markdown(text), display=False)


def glue_each(values: dict) -> None:
    """Glue every value under its key, for {glue:text}`key` in the text: the numbers a
    paragraph quotes, glued in one call instead of one `glue(..., display=False)` each.

    Examples
    --------
    >>> glue_each({"n-runs": 40, "mean": 1.25})  # outside a notebook: nothing is shown
    """
    from myst_nb import glue

    for key, value in values.items():
        glue(key, value, display=False)


def words(values) -> str:
    """A list of numbers as the text writes it, for a glue in the prose: '1, 2 and 4'.

    Examples
    --------
    >>> words([1, 2, 4]), words([64])
    ('1, 2 and 4', '64')
    """
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def sign_tuple(signs) -> str:
    """A tuple of signs as math, '$(-1, +1)$': a branch of a construction named in a table
    cell or a sentence.

    Examples
    --------
    >>> sign_tuple([-1, 1])
    '$(-1, +1)$'
    """
    return "$(" + ", ".join(f"{int(x):+d}" for x in signs) + ")$"


def value_and_interval(values, lows, highs) -> list[str]:
    """Each value with its interval, 'value [low, high]', to 3 significant figures: an estimate
    and its uncertainty in one column of a table.

    Examples
    --------
    >>> value_and_interval([0.1234], [0.05], [float("nan")])
    ['0.123 [0.05, –]']
    """
    return [
        f"{number(v)} [{number(lo)}, {number(hi)}]"
        for v, lo, hi in zip(values, lows, highs, strict=True)
    ]
