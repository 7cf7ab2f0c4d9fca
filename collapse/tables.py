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

__all__ = ["markdown", "show", "number", "tex"]


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
