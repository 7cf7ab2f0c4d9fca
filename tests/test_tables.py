"""Tables and figures for the page: numbers to their precision, human headers, page width."""

import math

import matplotlib
import pandas as pd
import pytest

from collapse import plotting, tables

matplotlib.use("Agg")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.123456789, "0.123"),
        (12345.678, "1.23e4"),
        (1.5e-7, "1.5e-7"),
        (3, "3"),
        (float("nan"), "–"),
        (None, "–"),
        (True, "yes"),
        (math.inf, "∞"),
        ("causal", "causal"),
    ],
)
def test_numbers_are_shown_to_their_precision(value, text):
    assert tables.number(value) == text


def test_tex_numbers_use_powers_of_ten():
    assert tables.tex(5.2134e-8) == r"5.21 \times 10^{-8}"
    assert tables.tex(2.2e-15, 2) == r"2.2 \times 10^{-15}"
    assert tables.tex(-math.inf) == r"-\infty" and tables.tex(0.5) == "0.5"


def test_markdown_table_renames_selects_and_drops_the_index():
    frame = pd.DataFrame(
        {"mask": ["complete", "causal"], "slope": [-0.123456, math.nan], "n": [3, 4]},
        index=[7, 9],
    )
    text = tables.markdown(frame, columns={"mask": "Mask", "slope": r"slope of $\log\mu$"})
    assert text.splitlines() == [
        r"| Mask | slope of $\log\mu$ |",
        "|---|---:|",
        "| complete | -0.123 |",
        "| causal | – |",
    ]
    indexed = tables.markdown(frame.set_index("mask"), index=True)
    assert indexed.splitlines()[0] == "| mask | slope | n |"
    with pytest.raises(KeyError, match="not in the table"):
        tables.markdown(frame, columns={"width": "Width"})


def test_a_pipe_in_a_cell_does_not_split_it():
    text = tables.markdown(pd.DataFrame({"a": ["x | y"]}))
    assert text.splitlines()[2] == r"| x \| y |"


def test_panels_put_at_most_three_in_a_row_at_page_width():
    plotting.use_style()
    fig, axes = plotting.panels(5, height=2.0, sharey=True)
    assert len(axes) == 5 and len(fig.axes) == 5  # the sixth cell of the grid is gone
    width, height = fig.get_size_inches()
    assert width == plotting.PAGE_WIDTH and height == 4.0
    assert {ax.get_subplotspec().colspan.start for ax in axes} == {0, 1, 2}
    with pytest.raises(ValueError, match="at most 3"):
        plotting.panels(4, ncols=4)


def test_one_legend_for_the_figure_with_each_label_once():
    plotting.use_style()
    fig, axes = plotting.panels(3)
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="complete")
        ax.plot([0, 1], [1, 0], label="causal")
    legend = plotting.shared_legend(fig)
    assert [t.get_text() for t in legend.get_texts()] == ["complete", "causal"]
    assert all(ax.get_legend() is None for ax in axes)
