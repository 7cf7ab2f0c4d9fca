"""Every figure's data beside it: `figure_data.tidy` reads the plotted points back from hand-made
figures, IPython shows them as CSV in the figure's own output, and `figdata.write` turns those
outputs into files and download lines on the page."""

import io

import matplotlib
import nbformat
import numpy as np
import pandas as pd
import pytest
from nbformat import v4

from collapse import figure_data, plotting
from collapse.book import figdata

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(frame):
    """The frame's rows as lists, a blank cell as None."""
    return [[None if v != v else v for v in row] for row in frame.values.tolist()]


@pytest.fixture
def figure():
    """A fresh figure, closed after the test."""
    made = []

    def make(n=1, **kw):
        fig, axes = plotting.panels(n, **kw)
        made.append(fig)
        return fig, axes

    yield make
    for fig in made:
        plt.close(fig)


def test_lines_are_rows_named_by_the_axes_and_their_legend_labels(figure):
    fig, (ax,) = figure()
    ax.plot([0, 1, 2], [1.0, 0.5, 0.25], label="causal")
    ax.plot([0, 1], [2.0, np.nan])  # no label; the NaN point is not drawn
    ax.plot([], [], "ko", label="legend only")
    ax.set(xlabel="layer $t$", ylabel=r"$\mu(X_t)$")
    frame = figure_data.tidy(fig)
    assert list(frame.columns) == ["series", "layer $t$", r"$\mu(X_t)$"]
    assert frame.values.tolist() == [
        ["causal", 0.0, 1.0],
        ["causal", 1.0, 0.5],
        ["causal", 2.0, 0.25],
        ["", 0.0, 2.0],
    ]


def test_reference_lines_in_axes_coordinates_are_not_data(figure):
    fig, (ax,) = figure()
    ax.plot([1, 2], [3, 4], label="data")
    ax.axhline(1, label="threshold")
    ax.axvline(1.5)
    ax.plot([0, 1], [0, 1], transform=ax.transAxes)
    frame = figure_data.tidy(fig)
    assert frame.to_dict("list") == {"series": ["data", "data"], "x": [1.0, 2.0], "y": [3.0, 4.0]}


def test_panels_with_other_labels_get_their_own_columns(figure):
    fig, (left, right) = figure(2)
    left.plot([1, 2], [3, 4], label="a")
    left.set(xlabel="T", ylabel="sigma", title="(a) spectrum")
    right.plot([5], [6], label="b")
    right.set(xlabel="w")
    frame = figure_data.tidy(fig)
    assert list(frame.columns) == ["panel", "series", "T", "sigma", "w"]
    assert rows(frame) == [
        ["(a) spectrum", "a", 1.0, 3.0, None],
        ["(a) spectrum", "a", 2.0, 4.0, None],
        ["panel 2", "b", None, 6.0, 5.0],  # the row's y label, set once on its first panel
    ]


def test_a_shared_x_label_set_on_the_lowest_panel_names_the_column_above(figure):
    fig, axes = figure(4, ncols=2, sharex=True)
    for k, ax in enumerate(axes):
        ax.plot([0, 1], [k, k], label=f"{k}")
        ax.set_title(f"p{k}")
    axes[2].set(xlabel="layer", ylabel="mu")
    axes[3].set(xlabel="layer")
    frame = figure_data.tidy(fig)
    assert list(frame.columns) == ["panel", "series", "layer", "y", "mu"]
    assert frame.panel.tolist() == ["p0", "p0", "p1", "p1", "p2", "p2", "p3", "p3"]
    assert frame["layer"].tolist() == [0.0, 1.0] * 4  # every panel: the column's label
    assert frame["y"].notna().tolist() == [True] * 4 + [False] * 4  # the top row: no label
    assert frame["mu"].notna().tolist() == [False] * 4 + [True] * 4


def test_a_scatter_with_colours_has_a_value_column_named_by_its_colorbar(figure):
    fig, (ax,) = figure()
    points = ax.scatter([1, 2, 3], [4, 5, 6], c=[0.1, 0.2, 0.3], label="starts")
    fig.colorbar(points, ax=ax, label="temperature")
    ax.scatter([7], [8], color="k")  # one colour for all: no value column of its own
    ax.scatter([], [], label="legend only")
    ax.set(xlabel="a", ylabel="b")
    frame = figure_data.tidy(fig)  # the colorbar is not a second panel
    assert list(frame.columns) == ["series", "a", "b", "temperature"]
    assert rows(frame) == [
        ["starts", 1.0, 4.0, 0.1],
        ["starts", 2.0, 5.0, 0.2],
        ["starts", 3.0, 6.0, 0.3],
        ["", 7.0, 8.0, None],
    ]


def test_error_bars_give_each_point_its_lower_and_upper_end(figure):
    fig, (ax,) = figure()
    ax.errorbar([1, 2], [10.0, 20.0], yerr=[[1, 2], [3, 4]], fmt="o", capsize=3, label="fit")
    ax.errorbar([3], [30.0], xerr=0.5, fmt="s")
    ax.set(xlabel="r", ylabel="rate")
    frame = figure_data.tidy(fig)
    assert list(frame.columns) == ["series", "r", "rate", "rate lower", "rate upper"] + [
        "r lower",
        "r upper",
    ]
    assert rows(frame) == [
        ["fit", 1.0, 10.0, 9.0, 13.0, None, None],
        ["fit", 2.0, 20.0, 18.0, 24.0, None, None],
        ["", 3.0, 30.0, None, None, 2.5, 3.5],
    ]


def test_bars_and_histograms_are_one_row_per_bar_at_its_centre(figure):
    fig, (bars, filled, steps) = figure(3)
    bars.bar([1, 2], [5.0, 7.0], width=0.5, label="counts")
    bars.barh([10], [3.0], height=2.0)
    filled.hist([0.1, 0.2, 0.9], bins=2, range=(0, 1), label="bulk")
    steps.hist([0.1, 0.2, 0.9], bins=2, range=(0, 1), histtype="step", label="markov")
    steps.hist([0.6], bins=2, range=(0, 1), histtype="stepfilled", orientation="horizontal")
    frame = figure_data.tidy(fig)
    assert frame[["panel", "series", "x", "y"]].values.tolist() == [
        ["panel 1", "counts", 1.0, 5.0],
        ["panel 1", "counts", 2.0, 7.0],
        ["panel 1", "", 3.0, 10.0],
        ["panel 2", "bulk", 0.25, 2.0],
        ["panel 2", "bulk", 0.75, 1.0],
        ["panel 3", "markov", 0.25, 2.0],
        ["panel 3", "markov", 0.75, 1.0],
        ["panel 3", "", 0.0, 0.25],
        ["panel 3", "", 1.0, 0.75],
    ]


def test_a_band_joins_its_line_and_a_band_alone_has_rows_of_its_own(figure):
    fig, (ax,) = figure()
    values = np.array([[1.0, 3.0], [2.0, 6.0], [4.0, 8.0]])  # layers x samples
    plotting.band(ax, [0, 1, 2], values, label="causal")
    ax.fill_between([5, 6], [0.0, 1.0], [2.0, 0.5], color="0.5", label="spread")
    ax.set(xlabel="t", ylabel="mu")
    frame = figure_data.tidy(fig)
    assert list(frame.columns) == ["series", "t", "mu", "mu lower", "mu upper"]
    assert rows(frame) == [
        ["causal", 0.0, 2.0, 1.0, 3.0],
        ["causal", 1.0, 4.0, 2.0, 6.0],
        ["causal", 2.0, 6.0, 4.0, 8.0],
        ["spread", 5.0, None, 0.0, 2.0],
        ["spread", 6.0, None, 0.5, 1.0],
    ]


def test_images_are_one_row_per_cell_with_its_centre_and_value(figure):
    fig, (shown, mesh) = figure(2)
    shown.imshow(np.array([[1, 0, 1], [0, 1, 0]]), cmap="Greys")
    shown.set(xlabel="key $j$", ylabel="query $i$", title="mask")
    grid = np.ma.masked_invalid([[1.0, np.nan], [0.0, 1.0]])
    mesh.pcolormesh([0, 10, 20], [0, 4, 8], grid)
    mesh.set(xlabel="theta 1", ylabel="theta 2", title="torus")
    frame = figure_data.tidy(fig)
    mask = frame[frame.panel == "mask"][["key $j$", "query $i$", "value"]]
    assert mask.values.tolist() == [
        [0.0, 0.0, 1.0],
        [1.0, 0.0, 0.0],
        [2.0, 0.0, 1.0],
        [0.0, 1.0, 0.0],
        [1.0, 1.0, 1.0],
        [2.0, 1.0, 0.0],
    ]
    torus = frame[frame.panel == "torus"][["theta 1", "theta 2", "value"]]
    assert rows(torus) == [
        [5.0, 2.0, 1.0],
        [15.0, 2.0, None],  # masked: drawn as "bad", its value blank
        [5.0, 6.0, 0.0],
        [15.0, 6.0, 1.0],
    ]


def test_a_figure_without_data_has_no_rows(figure):
    fig, (ax,) = figure()
    ax.axhline(1)
    ax.text(0.5, 0.5, "nothing")
    assert figure_data.tidy(fig).empty


NOTEBOOK = [
    "from collapse import plotting\nplotting.use_style()\nimport matplotlib.pyplot as plt",
    "fig, ax = plt.subplots()\nax.plot([1, 2, 3], [4, 5, 6], label='line')\n"
    "ax.set(xlabel='layer', ylabel='mu')\nplt.show()",
    "from IPython.display import Markdown\nMarkdown('no figure')",
]


@pytest.mark.execution
def test_the_inline_backend_puts_the_csv_beside_the_png():
    from nbclient import NotebookClient

    notebook = v4.new_notebook(cells=[v4.new_code_cell(source) for source in NOTEBOOK])
    NotebookClient(notebook, kernel_name="python3", timeout=120).execute()
    (output,) = notebook.cells[1].outputs
    assert output.output_type == "display_data"
    assert {"image/png", figure_data.MIME} <= set(output.data)
    frame = pd.read_csv(io.StringIO(output.data[figure_data.MIME]), keep_default_na=False)
    assert frame.to_dict("list") == {
        "series": ["line"] * 3,
        "layer": [1, 2, 3],
        "mu": [4, 5, 6],
    }
    (other,) = notebook.cells[2].outputs
    assert "text/markdown" in other.data and figure_data.MIME not in other.data


def figure_cell(csv: str, name: str | None = None, tags=()):
    metadata = {"tags": list(tags)}
    if name:
        metadata["mystnb"] = {"figure": {"name": name, "caption": "A figure."}}
    cell = v4.new_code_cell("plt.show()", metadata=metadata)
    data = {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>", figure_data.MIME: csv}
    cell.outputs = [v4.new_output("display_data", data=data)]
    return cell


def chapter():
    return v4.new_notebook(
        cells=[
            v4.new_markdown_cell("# A chapter"),
            figure_cell("series,x,y\na,1,2\n", name="fig-first"),
            v4.new_markdown_cell("Prose."),
            figure_cell("series,x,y\nb,3,4\n"),
            figure_cell("series,x,y\nc,5,6\n", tags=["remove-cell"]),  # not on the page
            v4.new_code_cell("print('no figure')"),
        ]
    )


def test_write_saves_each_figure_and_links_it_under_the_figure(tmp_path):
    notebook = chapter()
    paths = figdata.write(notebook, tmp_path, "01-x")
    folder = tmp_path / "data" / "01-x"
    assert paths == [folder / "fig-first.csv", folder / "figure-2.csv"]
    assert [p.read_text() for p in paths] == ["series,x,y\na,1,2\n", "series,x,y\nb,3,4\n"]
    assert sorted(folder.iterdir()) == sorted(paths)
    sources = [c.source for c in notebook.cells]
    assert sources[2] == (
        "Data of this figure: {download}`fig-first.csv <data/01-x/fig-first.csv>` "
        "(CSV, one row per point)."
    )
    assert sources[5].startswith("Data of this figure: {download}`figure-2.csv <data/01-x/")
    tagged = [i for i, c in enumerate(notebook.cells) if figdata.TAG in c.metadata.get("tags", [])]
    assert tagged == [2, 5]
    assert figure_data.MIME in notebook.cells[1].outputs[0].data  # the .ipynb keeps the data
    nbformat.validate(notebook)


def test_write_is_idempotent_and_removes_stale_files(tmp_path):
    notebook = chapter()
    figdata.write(notebook, tmp_path, "01-x")
    once = nbformat.writes(notebook)
    stale = tmp_path / "data" / "01-x" / "figure-9.csv"
    stale.write_text("old")
    again = nbformat.reads(once, as_version=4)
    paths = figdata.write(again, tmp_path, "01-x")
    assert nbformat.writes(again) == once
    assert not stale.exists() and sorted((tmp_path / "data" / "01-x").iterdir()) == sorted(paths)
    again.cells = [c for c in again.cells if not c.get("outputs")]
    assert figdata.write(again, tmp_path, "01-x") == []
    assert not (tmp_path / "data" / "01-x").exists()
    assert all(figdata.TAG not in c.metadata.get("tags", []) for c in again.cells)
