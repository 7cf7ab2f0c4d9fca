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
    "linestyle_for",
    "band",
    "mask_matrices",
    "distinct_style",
    "percentile_band",
    "plain_log_ticks",
    "ratio_intervals",
    "histogram_against_law",
    "loglog_ticks",
    "layer_ticks",
    "layer_axis",
    "mask_bands",
    "mask_lines",
    "loglog_panel",
    "temperature_color",
    "temperature_bands",
    "threshold",
]

PAGE_WIDTH = 6.6  # inches at 100 dpi: the text column at 1280 px, with room for the margins
MAX_COLUMNS = 3  # panels per row: more would shrink the text below what a reader can read
# Okabe-Ito: distinguishable with every common colour-vision deficiency.
COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]


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
    """A stable colour for a mask name (so every figure agrees), else the index-th colour.

    The mask's colour is declared with it in `masks.REGISTRY`.

    Examples
    --------
    >>> color_for("causal") == COLORS[1], color_for("not a mask", 9) == COLORS[1]
    (True, True)
    """
    from . import masks

    entry = masks.REGISTRY.get(name)
    position = index if entry is None or entry.color is None else entry.color
    return COLORS[position % len(COLORS)]


def linestyle_for(name: str) -> str | tuple:
    """A mask's line style, declared with it in `masks.REGISTRY` ("-" for any other name).

    Examples
    --------
    >>> linestyle_for("dilated_global"), linestyle_for("causal")
    ('-.', '-')
    """
    from . import masks

    entry = masks.REGISTRY.get(name)
    return "-" if entry is None else entry.linestyle


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


def histogram_against_law(ax, samples, pdf, grid, *, law_label=None, note=None, law_kw=None,
                          **hist):
    """A density histogram of `samples` under the curve of a limit law's density `pdf`: how
    far an empirical spectrum is from its law, at a glance.

    Parameters
    ----------
    ax : matplotlib Axes
    samples : array_like
        The values, any shape (flattened).
    pdf : callable
        The law's density, evaluated on `grid`.
    grid : array_like
        Where the density is drawn, (n,).
    law_label : str, optional
        The legend entry of the density.
    note : str, optional
        A text in the panel's top right corner (e.g. a distance to the law).
    law_kw : dict, optional
        Style of the density's line (default: black, width 1.4).
    **hist
        Passed to ``ax.hist`` (bins, range, color, alpha, label); density=True always.

    Returns
    -------
    Line2D
        The density's line.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> x = np.random.default_rng(0).uniform(0, 1, 1000)
    >>> line = histogram_against_law(ax, x, np.ones_like, np.linspace(0, 1, 5), note="KS 0.02")
    >>> line.get_ydata().tolist()
    [1.0, 1.0, 1.0, 1.0, 1.0]
    """
    values = samples.numpy() if isinstance(samples, torch.Tensor) else np.asarray(samples)
    ax.hist(values.ravel(), density=True, **hist)
    style = {"color": "k", "lw": 1.4} | (law_kw or {})
    (line,) = ax.plot(grid, pdf(grid), label=law_label, **style)
    if note is not None:
        ax.text(0.97, 0.95, note, transform=ax.transAxes, ha="right", va="top", fontsize=8)
    return line



_DIGIT_EM = 0.64  # width of a digit in the style's sans-serif font, in em
_TICK_GAP = 0.06  # inches of blank between two neighbouring tick labels, at least


def _label_inches(text: str) -> float:
    """Width in inches of a tick label of digits at the style's tick font size."""
    size = mpl.font_manager.FontProperties(size=mpl.rcParams["xtick.labelsize"])
    return len(text) * _DIGIT_EM * size.get_size_in_points() / 72


def layer_ticks(depth: int, width: float) -> list[int]:
    """Layers to label on a log axis from 1 to `depth`, `width` inches long, so that no two
    labels touch: powers 1, 2^k, 2^2k, ... and `depth` itself.

    k is the smallest step whose labels fit; the last power is dropped when its label would
    crowd the label of `depth` (64 next to 128 on a narrow panel).

    Parameters
    ----------
    depth : int
        The last layer, always labelled.
    width : float
        The axis length in inches (a figure is drawn at 100 dpi, so also in pixels / 100).

    Returns
    -------
    list of int
        The layers to label, increasing.

    Examples
    --------
    >>> layer_ticks(12, 1.3), layer_ticks(128, 1.3), layer_ticks(128, 6.0)
    ([1, 2, 4, 8, 12], [1, 4, 16, 128], [1, 2, 4, 8, 16, 32, 64, 128])
    """
    octave = width / max(math.log2(depth), 1.0)  # inches per factor 2 on the axis

    def room(a: int, b: int) -> float:  # inches from tick a to tick b that their labels need
        return (_label_inches(str(a)) + _label_inches(str(b))) / 2 + _TICK_GAP

    step = 1
    while step * octave < room(depth, depth):
        step += 1
    ticks = [2**j for j in range(0, int(math.log2(depth)) + 1, step) if 2**j < depth]
    while ticks and math.log2(depth / ticks[-1]) * octave < room(ticks[-1], depth):
        ticks.pop()
    return [*ticks, depth]


def layer_axis(ax, depth: int | None = None, *, label: str | None = "layer $t$") -> None:
    """The layer axis of a depth plot: log-scaled from t = 1 with plain labels that never
    collide when `depth` is given (`layer_ticks` for the axis's width), else linear with
    integer ticks.

    Parameters
    ----------
    ax : matplotlib Axes
    depth : int, optional
        The last layer of a log-log plot; None for a linear axis from t = 0.
    label : str or None
        The axis label; None leaves it off (inner panels of a grid).

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots(figsize=(PAGE_WIDTH / 3, 2))
    >>> layer_axis(ax, 128)
    >>> [int(t) for t in ax.get_xticks()]
    [1, 4, 16, 128]
    """
    if label is not None:
        ax.set_xlabel(label)
    if depth is None:
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True))
        return
    ax.set_xscale("log")
    width = ax.get_position().width * ax.figure.get_figwidth()
    ax.set_xticks(layer_ticks(depth, width))
    ax.xaxis.set_major_formatter(mpl.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(mpl.ticker.NullFormatter())


def mask_bands(
    ax, curves, *, first: int = 0, log: bool = True, legend: bool = True, labels=None
) -> dict:
    """A band per mask (mean and +-1 std over runs) in the mask's own colour: the book's
    figure of one quantity against depth under several masks.

    Parameters
    ----------
    ax : matplotlib Axes
    curves : dict
        {mask name: values (layers, runs)}, layer 0 first.
    first : int
        The first layer drawn (1 on a log-log plot).
    log : bool
        Statistics of the log, for a log-scale y axis (see `band`).
    legend : bool
        Label the bands with the masks' names.
    labels : dict, optional
        {mask name: legend text} for the masks whose text is not their name alone.

    Returns
    -------
    dict
        {mask name: its mean line}, whose colour a bound drawn next to it can take.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> lines = mask_bands(ax, {"causal": np.ones((4, 3)), "complete": np.ones((4, 3)) / 2})
    >>> [line.get_label() for line in ax.get_lines()]
    ['causal', 'complete']
    """
    from . import masks

    lines = {}
    for mask, values in curves.items():
        label = (labels or {}).get(mask, masks.label(mask)) if legend else None
        steps = np.arange(first, len(values))
        lines[mask] = band(
            ax, steps, values[first:], log=log, color=color_for(mask),
            ls=linestyle_for(mask), label=label,
        )
    return lines


def mask_lines(ax, table, *, legend: bool = True, **kw) -> None:
    """One marked line per mask column of `table` (rows the layers), in the mask's colour: a
    number per layer and mask, such as a gap between two runs.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> import pandas as pd
    >>> fig, ax = plt.subplots()
    >>> mask_lines(ax, pd.DataFrame({"causal": [0.0, 1.0]}), ls="--")
    >>> ax.get_lines()[0].get_label(), ax.get_lines()[0].get_linestyle()
    ('causal', '--')
    """
    from . import masks

    for mask in table.columns:
        label = masks.label(mask) if legend else None
        ax.plot(table[mask], color=color_for(mask), marker="o", ms=3, label=label, **kw)


def loglog_panel(ax, curves, *, title: str | None = None) -> None:
    """mu against layer on log-log axes from t = 1, a band per mask, with a dotted line at
    mu(X^(0)) and at least a decade either side of it: where a stack ends against where
    it started.

    Parameters
    ----------
    ax : matplotlib Axes
    curves : dict
        {mask name: mu (layers, runs)} from layer 0; the runs share X^(0), and the last
        mask's layer 0 (geometric mean over runs) gives the dotted line.
    title : str, optional

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> loglog_panel(ax, {"causal": np.full((13, 2), 2.0)})
    >>> bool(ax.get_ylim()[0] <= 0.2 and ax.get_ylim()[1] >= 20)
    True
    """
    mask_bands(ax, curves, first=1)
    start = list(curves.values())[-1]
    mu0 = np.exp(np.log(np.asarray(start[0], dtype=float)).mean())
    ax.axhline(mu0, color="0.5", ls=":", lw=1, label=r"$\mu(X^{(0)})$")
    ax.set_yscale("log")
    low, high = ax.get_ylim()
    ax.set(ylim=(min(low, mu0 / 10), max(high, mu0 * 10)), title=title)
    layer_axis(ax, len(start) - 1)


def temperature_color(i: int, n: int) -> tuple:
    """The i-th of n temperatures' colour, cold to hot, apart from the masks' colours."""
    import matplotlib.pyplot as plt

    return plt.cm.plasma(0.8 * i / max(1, n - 1))


def temperature_bands(ax, curves, *, log: bool = True) -> None:
    """A band per softmax temperature d_QK (mean and +-1 std over runs), coloured cold to
    hot and labelled "d_QK = 1/64": how the temperature moves a curve.

    Parameters
    ----------
    ax : matplotlib Axes
    curves : dict
        {d_QK: values (layers, runs)}, layer 0 first, in increasing d_QK.
    log : bool
        Statistics of the log, for a log-scale y axis (see `band`).

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> temperature_bands(ax, {1 / 64: np.ones((3, 2)), 64.0: np.ones((3, 2))})
    >>> [line.get_label() for line in ax.get_lines()]
    ['$d_{QK} = 1/64$', '$d_{QK} = 64$']
    """
    from .tables import fraction

    for i, (d_qk, values) in enumerate(curves.items()):
        color = temperature_color(i, len(curves))
        label = f"$d_{{QK}} = {fraction(d_qk)}$"
        band(ax, np.arange(len(values)), values, log=log, color=color, label=label)


def threshold(ax, y: float, label: str | None = None) -> None:
    """A verdict's bound as a black dashed line at height `y`, labelled for the legend."""
    ax.axhline(y, color="k", ls="--", lw=1, label=label)


def mask_matrices(matrices, *, height: float = 2.5, token_labels: bool = True, title_size=None):
    """Each mask as a matrix of squares, dark where query i may attend to key j, one panel
    per mask: what a pattern looks like before any of its graph is measured.

    Parameters
    ----------
    matrices : dict
        {panel title: boolean mask (n, n)}.
    height : float
        Inches per row of panels.
    token_labels : bool
        Number the first and last token on both axes and name them "query i" and "key j"
        on the outer panels; False leaves the axes bare.
    title_size : float, optional
        The titles' font size (default: the style's).

    Returns
    -------
    Figure

    Examples
    --------
    >>> import torch
    >>> fig = mask_matrices({"causal": torch.ones(4, 4).tril().bool()})
    >>> [ax.get_title() for ax in fig.axes], fig.axes[0].get_xticklabels()[-1].get_text()
    (['causal'], '4')
    """
    fig, axes = panels(len(matrices), height=height)
    for k, (ax, (title, mask)) in enumerate(zip(axes, matrices.items(), strict=True)):
        n = mask.shape[-1]
        ax.imshow(np.asarray(mask), cmap="Greys", vmin=0, vmax=1.3)
        ax.set_title(title, **({} if title_size is None else {"fontsize": title_size}))
        ax.grid(False)
        ax.spines[:].set_visible(True)
        if not token_labels:
            ax.set(xticks=[], yticks=[])
            continue
        ax.set(xticks=[0, n - 1], yticks=[0, n - 1], xticklabels=[1, n], yticklabels=[1, n])
        if k % MAX_COLUMNS == 0:
            ax.set_ylabel("query $i$")
        if k + MAX_COLUMNS >= len(matrices):  # the lowest panel of its column
            ax.set_xlabel("key $j$")
    return fig


def loglog_ticks(ax, ticks) -> None:
    """Log-log axes whose x ticks are plain numbers at `ticks` (the sizes of a grid), with no
    minor-tick labels: a power law read against the sizes that were run.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> loglog_ticks(ax, [20, 40, 80])
    >>> ax.get_xscale(), ax.get_yscale(), [float(t) for t in ax.get_xticks()]
    ('log', 'log', [20.0, 40.0, 80.0])
    """
    from matplotlib import ticker

    ax.set(xscale="log", yscale="log")
    ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
    ax.xaxis.set_major_formatter(ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def distinct_style(i: int) -> dict:
    """The i-th curve's colour and line style when a panel has more curves than colours:
    the eight colours solid, then again dashed, then dash-dotted (24 curves in all).

    Examples
    --------
    >>> distinct_style(1) == {"color": COLORS[1], "ls": "-"}, distinct_style(9)["ls"]
    (True, '--')
    """
    return {"color": COLORS[i % len(COLORS)], "ls": ["-", "--", "-."][i // len(COLORS)]}


def percentile_band(ax, x, values, *, color=None, label=None, percentiles=(10, 50, 90)):
    """The median line and a 10th-90th percentile band over axis 1 of values (x, samples):
    a spread that stays meaningful on a log axis over many orders of magnitude.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> line = percentile_band(ax, [0, 1], np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]))
    >>> line.get_ydata().tolist()
    [2.0, 4.0]
    """
    lo, median, hi = np.percentile(values, percentiles, axis=1)
    (line,) = ax.plot(x, median, color=color, label=label)
    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.18, linewidth=0)
    return line


def plain_log_ticks(ax) -> None:
    """Label a log y axis with plain numbers (0.3, 2) where matplotlib labels a tick, not
    '3 x 10^-1': a loss axis read at a glance.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> ax.set_yscale("log")
    >>> plain_log_ticks(ax)
    >>> ax.yaxis.get_major_formatter()(0.3, 0)
    '0.3'
    """
    from matplotlib import ticker

    class PlainLogFormatter(ticker.LogFormatterSciNotation):
        def __call__(self, x, pos=None):
            text = super().__call__(x, pos)
            return f"{x:g}" if text and 1e-3 <= x < 1e4 else text

    ax.yaxis.set_major_formatter(PlainLogFormatter())
    ax.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))


_RATIO_TICKS = [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 20]
_ROUND_TICKS = (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20)


def ratio_intervals(ax, arms, tick_label, *, threshold: float = 0.95,
                    ylabel: str = "final loss, fix / no fix") -> None:
    """A ratio with its interval per case, one colour per arm, on a log axis with a line at 1
    and at `threshold`: whether an effect clears the bar, case by case.

    Parameters
    ----------
    arms : DataFrame
        Index (arm, *case), columns "ratio", "ci low", "ci high".
    tick_label : callable
        case -> the x tick's text.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> import pandas as pd
    >>> arms = pd.DataFrame({"ratio": [0.9, 1.1], "ci low": [0.8, 1.0], "ci high": [1.0, 1.2]},
    ...                     index=pd.MultiIndex.from_tuples([("a", 1), ("b", 1)]))
    >>> fig, ax = plt.subplots()
    >>> ratio_intervals(ax, arms, lambda case: f"L = {case}")
    >>> [t.get_text() for t in ax.get_xticklabels()]
    ['L = 1']
    """
    from matplotlib import ticker

    cases = list(dict.fromkeys(arms.index.droplevel(0)))
    for i, (arm, frame) in enumerate(arms.groupby(level=0, sort=False)):
        offset = 0.15 * (i - (arms.index.levshape[0] - 1) / 2)
        x = [cases.index(c) + offset for c in frame.index.droplevel(0)]
        err = np.array([frame["ratio"] - frame["ci low"], frame["ci high"] - frame["ratio"]])
        ax.errorbar(x, frame["ratio"], yerr=err, fmt="o", capsize=3, color=COLORS[i], label=arm)
    ax.set_xticks(range(len(cases)), [tick_label(c) for c in cases])
    ax.axhline(1, color="0.4", lw=1, label="no effect")
    ax.axhline(threshold, color="k", ls="--", lw=1, label=f"benefit threshold {threshold:g}")
    ax.set(yscale="log", ylabel=ylabel)
    low, high = ax.get_ylim()
    ticks = [t for t in _RATIO_TICKS if low <= t <= high]
    if len(ticks) > 7:  # a wide range: fewer, rounder ticks
        ticks = [t for t in ticks if t in _ROUND_TICKS]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
