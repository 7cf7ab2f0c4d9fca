"""Every figure's numbers as a table beside it: one row per plotted point, the columns named as
on the axes.

A reader who wants to re-plot, compare or check a figure should not have to re-run its chapter
or digitise a PNG. `tidy` reads the numbers back from the artists the figure holds, so no
chapter has to say what it drew; `register` makes IPython put them, as CSV, in the same output
as the picture, which the book then offers for download (collapse.book.figdata).
"""

from __future__ import annotations

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
from matplotlib.collections import PathCollection, PolyCollection, QuadMesh
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Polygon
from matplotlib.path import Path

__all__ = ["MIME", "tidy", "register"]

MIME = "application/vnd.collapse.figure-data+csv"


def _text(text: str) -> str:
    return text.replace("\n", " ").strip()


def _series(artist) -> str:
    label = artist.get_label() or ""
    return "" if label.startswith("_") else label


def _in_data(ax, transform) -> bool:
    """Drawn in data coordinates (not axhline/axvline's axes fractions, not an inset's)."""
    return transform.contains_branch(ax.transData)


def _cell(ax):
    """The panel's cell in the figure's grid (a colorbar may have nested it in one of its own)."""
    spec = ax.get_subplotspec()
    return None if spec is None else spec.get_topmost_subplotspec()


def _label(ax, which: str, axes: list) -> str:
    """The axis label; when empty, that of a panel sharing the axis or its grid column (x) / row
    (y): the book labels a row of panels once, on its first."""
    own = _text(getattr(ax, f"get_{which}label")())
    if own:
        return own
    span = "colspan" if which == "x" else "rowspan"
    spec = _cell(ax)
    for other in axes:
        text = _text(getattr(other, f"get_{which}label")())
        if other is ax or not text:
            continue
        theirs = _cell(other)
        aligned = (
            spec is not None
            and theirs is not None
            and spec.get_gridspec() is theirs.get_gridspec()
            and getattr(spec, span) == getattr(theirs, span)
        )
        if aligned or getattr(ax, f"get_shared_{which}_axes")().joined(ax, other):
            return text
    return which


def _title(ax) -> str:
    titles = (_text(ax.get_title(loc)) for loc in ("center", "left", "right"))
    return next((t for t in titles if t), "")


def _names(ax, axes: list) -> tuple[str, str]:
    x, y = _label(ax, "x", axes), _label(ax, "y", axes)
    return (f"{x} (x)", f"{y} (y)") if x == y else (x, y)


def _value_name(mappable) -> str:
    bar = mappable.colorbar
    if bar is None:
        return "value"
    label = bar.ax.get_ylabel() if bar.orientation == "vertical" else bar.ax.get_xlabel()
    return _text(label) or "value"


def _floats(values) -> np.ndarray:
    return np.ma.filled(np.ma.asarray(values, dtype=float), np.nan)


def _points(series: str, names, xy: np.ndarray, **extra) -> pd.DataFrame:
    """Rows of the finite (x, y) points, with `extra` columns of the same length."""
    frame = pd.DataFrame({"series": series, names[0]: xy[:, 0], names[1]: xy[:, 1], **extra})
    return frame[np.isfinite(xy).all(axis=1)].reset_index(drop=True)


def _line(line: Line2D, names) -> pd.DataFrame | None:
    if not _in_data(line.axes, line.get_transform()):
        return None
    return _points(_series(line), names, _floats(line.get_xydata()))


def _scatter(collection: PathCollection, names) -> pd.DataFrame | None:
    if not _in_data(collection.axes, collection.get_offset_transform()):
        return None
    xy = _floats(collection.get_offsets()).reshape(-1, 2)
    values = collection.get_array()
    extra = {}
    if values is not None and np.size(values) == len(xy):
        extra[_value_name(collection)] = _floats(values).ravel()
    return _points(_series(collection), names, xy, **extra)


def _errorbar(container: ErrorbarContainer, names) -> pd.DataFrame | None:
    """One row per point: x, y and the ends of its error bars (`<label> lower` / `upper`)."""
    data_line, _, bar_lines = container
    if data_line is None:
        return None
    xy = _floats(data_line.get_xydata())
    extra = {}
    errors = [(0, container.has_xerr), (1, container.has_yerr)]
    for axis, collection in zip([a for a, has in errors if has], bar_lines, strict=True):
        lower, upper = np.full(len(xy), np.nan), np.full(len(xy), np.nan)
        segments = iter(collection.get_segments())
        segment = next(segments, None)
        for i, point in enumerate(xy):  # errorevery may leave points without a bar
            if segment is not None and segment[0][1 - axis] == point[1 - axis]:
                lower[i], upper[i] = sorted(segment[:, axis])
                segment = next(segments, None)
        extra[f"{names[axis]} lower"], extra[f"{names[axis]} upper"] = lower, upper
    return _points(_series(container), names, xy, **extra)


def _bars(container: BarContainer, names) -> pd.DataFrame:
    """A bar chart or histogram: each bar's centre and height (length, for horizontal bars)."""
    rows = []
    for rect in container.patches:
        x, y, w, h = rect.get_x(), rect.get_y(), rect.get_width(), rect.get_height()
        rows.append((x + w / 2, h) if container.orientation == "vertical" else (w, y + h / 2))
    labels = [_series(container)] + [_series(p) for p in container.patches]
    series = next((s for s in labels if s), "")
    return _points(series, names, np.array(rows, dtype=float).reshape(-1, 2))


def _steps(polygon: Polygon, names) -> pd.DataFrame | None:
    """A step histogram (hist's histtype "step" or "stepfilled"): each bin's centre and height.

    Its outline runs up from the baseline, along each bin's top, down to the baseline (and, when
    filled, back along it); any other polygon is not data the book draws.
    """
    if not _in_data(polygon.axes, polygon.get_transform()):
        return None
    v = polygon.get_xy()
    n = (len(v) - 2) // 2 if len(v) % 2 == 0 else (len(v) - 1) // 4
    if n < 1:
        return None
    tops = v[1 : 2 * n + 1].reshape(n, 2, 2)  # bin k: its top's two ends
    for along, height in ((0, 1), (1, 0)):  # vertical bins, then horizontal
        if np.array_equal(tops[:, 0, height], tops[:, 1, height]):
            centre, value = tops[:, :, along].mean(axis=1), tops[:, 0, height]
            xy = np.column_stack((centre, value) if along == 0 else (value, centre))
            return _points(_series(polygon), names, xy)
    return None


def _band_edges(collection: PolyCollection):
    """fill_between's polygons as (t, lower, upper), t along its direction; None for others."""
    parts = []
    for path in collection.get_paths():
        v = path.vertices
        if path.codes is not None and path.codes[-1] == Path.CLOSEPOLY:
            v = v[:-1]
        n = (len(v) - 2) // 2
        if n < 1 or len(v) != 2 * n + 2:
            return None
        t = 1 if getattr(collection, "t_direction", "x") == "y" else 0
        forward, back = v[1 : n + 1], v[n + 2 :][::-1]
        if not np.array_equal(forward[:, t], back[:, t]):
            return None
        a, b = forward[:, 1 - t], back[:, 1 - t]
        parts.append((forward[:, t], np.minimum(a, b), np.maximum(a, b)))
    if not parts:
        return None
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))


def _band(collection: PolyCollection, names, lines) -> pd.DataFrame | None:
    """A band: `<label> lower` / `<label> upper` columns on the line it surrounds (same colour,
    same points, drawn before it, as plotting.band draws them), else rows of its own."""
    if not _in_data(collection.axes, collection.get_transform()):
        return None
    edges = _band_edges(collection)
    if edges is None:
        return None
    t, lower, upper = edges
    along = 1 if getattr(collection, "t_direction", "x") == "y" else 0
    value = names[1 - along]
    columns = {f"{value} lower": lower, f"{value} upper": upper}
    faces = collection.get_facecolor()
    colour = mcolors.to_rgb(faces[0]) if len(faces) else None
    for line, frame in reversed(lines):
        if (
            frame is not None
            and colour is not None
            and np.allclose(mcolors.to_rgb(line.get_color()), colour)
            and np.array_equal(frame[names[along]].to_numpy(), t)
        ):
            for name, column in columns.items():
                frame[name] = column
            return None
    return pd.DataFrame({"series": _series(collection), names[along]: t, **columns})


def _image(image, names) -> pd.DataFrame | None:
    """imshow / pcolormesh: one row per cell, its centre in data coordinates and its value
    (blank where masked)."""
    values = image.get_array()
    if values is None or np.ndim(values) != 2:  # an RGB(A) picture, not a field of values
        return None
    values = _floats(values)
    rows, cols = values.shape
    if isinstance(image, AxesImage):
        if not _in_data(image.axes, image.get_transform()):
            return None
        left, right, bottom, top = image.get_extent()
        first, last = (top, bottom) if image.origin == "upper" else (bottom, top)
        x = left + (np.arange(cols) + 0.5) * (right - left) / cols
        y = first + (np.arange(rows) + 0.5) * (last - first) / rows
        x, y = np.meshgrid(x, y)
    else:
        c = image.get_coordinates()
        if c.shape[:2] != values.shape:  # flat shading: a value per cell, at its corners' mean
            c = (c[:-1, :-1] + c[1:, :-1] + c[:-1, 1:] + c[1:, 1:]) / 4
        x, y = c[..., 0], c[..., 1]
    return pd.DataFrame(
        {
            "series": _series(image),
            names[0]: x.ravel(),
            names[1]: y.ravel(),
            _value_name(image): values.ravel(),
        }
    )


def _members(container):
    for item in container:
        if isinstance(item, tuple):
            yield from _members(item)
        elif item is not None:
            yield item


def _panel(ax, axes: list) -> list[pd.DataFrame]:
    """The frames of one panel's artists, in the order they were drawn."""
    names = _names(ax, axes)
    owner = {
        id(a): c
        for c in ax.containers
        if isinstance(c, (BarContainer, ErrorbarContainer))
        for a in _members(c)
    }
    frames, lines, seen = [], [], set()
    for artist in ax.get_children():
        container = owner.get(id(artist))
        if container is not None:
            if id(container) not in seen:
                seen.add(id(container))
                read = _bars if isinstance(container, BarContainer) else _errorbar
                frames.append(read(container, names))
            continue
        if isinstance(artist, Line2D):
            frame = _line(artist, names)
            lines.append((artist, frame))
        elif isinstance(artist, PathCollection):
            frame = _scatter(artist, names)
        elif isinstance(artist, (AxesImage, QuadMesh)):
            frame = _image(artist, names)
        elif isinstance(artist, PolyCollection):
            frame = _band(artist, names, lines)
        elif isinstance(artist, Polygon):
            frame = _steps(artist, names)
        else:
            continue
        frames.append(frame)
    return [f for f in frames if f is not None and len(f)]


def tidy(fig) -> pd.DataFrame:
    """The figure's data, one row per plotted point: `panel` (the panel's title, or "panel k";
    only when several panels hold data), `series` (the legend label, "" without one), then the
    columns named by the axis labels ("x"/"y" when a panel has none); panels with other labels
    add their own columns, blank elsewhere. Colorbars are not panels.
    """
    colorbars = {
        id(m.colorbar.ax)
        for ax in fig.axes
        for m in (*ax.images, *ax.collections)
        if getattr(m, "colorbar", None) is not None
    }
    axes = [ax for ax in fig.axes if id(ax) not in colorbars]
    panels = [(k, ax, _panel(ax, axes)) for k, ax in enumerate(axes, 1)]
    panels = [p for p in panels if p[2]]
    if not panels:
        return pd.DataFrame(columns=["series"])
    if len(panels) > 1:
        for k, ax, frames in panels:
            for frame in frames:
                frame.insert(0, "panel", _title(ax) or f"panel {k}")
    return pd.concat([f for _, _, frames in panels for f in frames], ignore_index=True)


def register(shell) -> None:
    """Give IPython a display format for figures: their `tidy` data as CSV, under MIME.

    The inline backend shows a figure with display(fig), which asks every formatter: the CSV
    then lands in the same output as the PNG, when the figure is drawn, with no change to the
    chapters. A figure without data gets none.
    """
    from IPython.core.formatters import BaseFormatter
    from matplotlib.figure import Figure
    from traitlets import ObjectName, Unicode

    class FigureDataFormatter(BaseFormatter):
        format_type = Unicode(MIME)
        print_method = ObjectName("_repr_figure_data_")  # not __repr__: only figures have data

    formatter = FigureDataFormatter(parent=shell.display_formatter)
    shell.display_formatter.formatters[MIME] = formatter
    formatter.for_type(Figure, _csv)


def _csv(fig) -> str | None:
    frame = tidy(fig)
    return frame.to_csv(index=False) if len(frame) else None
