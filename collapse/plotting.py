"""One figure style for the whole book, drawn for the page it is shown on, and the few plot
helpers every notebook needs.

The book's text column is about 690 CSS pixels wide at 1280 px. A figure is drawn at
`PAGE_WIDTH` inches at 100 pixels per inch, so that it is shown at its drawn size and its
9-10 pt text stays 12-14 px tall on screen; the notebook stores it at twice that
resolution (the inline backend's "retina" format), which the book links as the full-size
image a reader can open.
"""

from __future__ import annotations

import math

import matplotlib as mpl
import numpy as np
import torch

__all__ = [
    "use_style",
    "PAGE_WIDTH",
    "MAX_COLUMNS",
    "panels",
    "shared_legend",
    "COLORS",
    "color_for",
    "band",
]

PAGE_WIDTH = 6.6  # inches at 100 dpi: the text column at 1280 px, with room for the margins
MAX_COLUMNS = 3  # panels per row: more would shrink the text below what a reader can read
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
            "figure.figsize": (PAGE_WIDTH, 3.6),
            "figure.dpi": 100,
            "figure.constrained_layout.use": True,
            "savefig.dpi": 200,
            "savefig.bbox": "tight",
            "font.size": 10,
            "axes.titlesize": 10,
            "axes.labelsize": 10,
            "xtick.labelsize": 9,
            "ytick.labelsize": 9,
            "legend.fontsize": 9,
            "legend.frameon": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "lines.linewidth": 1.6,
            "axes.prop_cycle": mpl.cycler(color=COLORS),
        }
    )
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # plain Python: nothing is shown inline
        return
    shell = get_ipython()
    if shell is not None:
        from . import figure_data

        set_matplotlib_formats("retina")  # twice the pixels, shown at the drawn size
        figure_data.register(shell)  # and each figure's data as CSV in the same output


def panels(n: int, *, height: float = 2.4, ncols: int | None = None, **subplots):
    """A figure of `n` panels, at most MAX_COLUMNS per row, as wide as the page.

    height: inches per row of panels. Returns (fig, axes) with axes a flat list of n; the
    grid's unused cells are removed. Extra keywords go to plt.subplots (sharex, sharey).
    """
    import matplotlib.pyplot as plt

    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    ncols = min(n, ncols or MAX_COLUMNS)
    if ncols > MAX_COLUMNS:
        raise ValueError(f"ncols must be at most {MAX_COLUMNS}, got {ncols}")
    nrows = math.ceil(n / ncols)
    fig, grid = plt.subplots(
        nrows, ncols, figsize=(PAGE_WIDTH, height * nrows), squeeze=False, **subplots
    )
    axes = list(grid.flat)
    for ax in axes[n:]:
        ax.remove()
    return fig, axes[:n]


def shared_legend(fig, axes=None, *, ncol: int | None = None, **kw):
    """One legend for the whole figure, under its panels: every distinct label of `axes`
    (default: all of the figure's) once, in the order first drawn.
    """
    handles, labels = [], []
    for ax in axes if axes is not None else fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels and not label.startswith("_"):
                handles.append(handle)
                labels.append(label)
    if not handles:
        return None
    return fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=ncol or min(len(labels), 4),
        **kw,
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
