"""One figure style for the whole book, and the few plot helpers every notebook needs."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
import torch

__all__ = ["use_style", "COLORS", "color_for", "band"]

# Okabe-Ito: distinguishable with every common colour-vision deficiency.
COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
_NAMED = {
    "complete": COLORS[0],
    "causal": COLORS[1],
    "sliding_window": COLORS[2],
    "causal_sliding_window": COLORS[3],
    "dilated_sliding_window": COLORS[4],
    "global_window": COLORS[5],
}


def use_style() -> None:
    """Apply the book's matplotlib style (call once at the top of a notebook)."""
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 110,
            "savefig.dpi": 150,
            "savefig.bbox": "tight",
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "legend.fontsize": 8.5,
            "legend.frameon": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "lines.linewidth": 1.6,
            "axes.prop_cycle": mpl.cycler(color=COLORS),
        }
    )


def color_for(name: str, index: int = 0) -> str:
    """A stable colour for a mask name (so every figure agrees), else the index-th colour."""
    return _NAMED.get(name, COLORS[index % len(COLORS)])


def band(ax, x, values, *, label=None, color=None, log: bool = False, width: float = 1.0, **kw):
    """Mean line and a +-width*std band over axis 1 of values (layers x samples).

    With log=True the statistics are taken of log(values) and shown exponentiated,
    which is what a log-scale axis needs (a linear std band crosses zero).
    """
    v = values.numpy() if isinstance(values, torch.Tensor) else np.asarray(values, dtype=float)
    v = v.reshape(v.shape[0], -1)
    data = np.log(v) if log else v
    mean, std = data.mean(1), data.std(1)
    lo, hi = mean - width * std, mean + width * std
    if log:
        mean, lo, hi = np.exp(mean), np.exp(lo), np.exp(hi)
    (line,) = ax.plot(x, mean, label=label, color=color, **kw)
    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.18, linewidth=0)
    return line
