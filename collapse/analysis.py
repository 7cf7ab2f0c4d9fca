"""Reading a sweep's tidy frame: curves, log-statistics, fitted rates and summary tables.

Every verdict on a sweep reads one of these: a layer's mean log mu, a net fall, a fitted
slope, an ordering at the last layer.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import fit
from .checks import ParameterError, check_int
from .sweep import GRID

__all__ = ["curves", "log_stats", "rates", "at_layer", "summary"]


def _select(frame: pd.DataFrame, select: dict) -> pd.DataFrame:
    for column, value in select.items():
        if column not in frame:
            raise ParameterError(f"no column {column!r}; columns are {', '.join(frame.columns)}")
        frame = (
            frame[np.isclose(frame[column], value)]
            if column == "d_qk"
            else frame[frame[column] == value]
        )
    if frame.empty:
        raise ParameterError(f"no rows match {select}")
    return frame


def curves(frame: pd.DataFrame, metric: str = "mu", **select) -> np.ndarray:
    """Metric values as an array (layers, runs) for the selected rows (e.g. config=..., mask=...).

    Why: the plotting band and fit.log_slope take (layers x runs) arrays; runs are
    (seed, sample) pairs and every selected grid cell must be fully run.
    """
    rows = _select(frame, select)
    table = rows.pivot_table(
        index="layer",
        columns=[c for c in [*GRID, "seed", "sample"] if c in rows],
        values=metric,
        aggfunc="first",
    )
    return table.to_numpy(dtype=float)


def log_stats(frame: pd.DataFrame, metric: str = "mu", floor: float = 1e-300) -> pd.DataFrame:
    """Mean and std over runs of log(metric), per (config, mask, d_qk, layer).

    Why: the papers plot mu on log axes and our verdicts compare log mu; values below
    `floor` (exact zeros once tokens coincide bit for bit) are clipped to it so that
    log stays finite.
    """
    logged = frame.assign(log=np.log(np.maximum(frame[metric].to_numpy(dtype=float), floor)))
    stats = logged.groupby([*GRID, "layer"])["log"].agg(["mean", "std", "count"])
    return stats.reset_index()


def at_layer(frame: pd.DataFrame, layer: int, metric: str = "mu") -> pd.DataFrame:
    """Mean log(metric) at one layer as a table: rows (config, mask), columns d_qk.

    Why: the verdicts read log mu at a given depth across temperatures and masks.
    """
    stats = log_stats(frame, metric)
    return stats[stats["layer"] == check_int("layer", layer, minimum=0)].pivot_table(
        index=["config", "mask"], columns="d_qk", values="mean"
    )


def rates(
    frame: pd.DataFrame,
    metric: str = "mu",
    *,
    start: int = 0,
    stop: int | None = None,
    floor: float = 1e-10,
) -> pd.DataFrame:
    """Least-squares slope of log(metric) against the layer, per (config, mask, d_qk): mean and std
    over runs.

    Why: the rate checks fit only layers start..stop-1 where mu/mu(0) > floor
    (float64 floors log mu near -35). A run with fewer than two such layers gives NaN.
    """
    out = []
    for key, rows in frame.groupby(GRID, sort=False):
        values = curves(rows, metric)
        slope = fit.log_slope(values, floor=floor, start=start, stop=stop)
        finite = slope[np.isfinite(slope)]
        mean, std = (finite.mean(), finite.std()) if finite.size else (math.nan, math.nan)
        out.append(
            {**dict(zip(GRID, key, strict=True)), "slope": mean, "std": std, "runs": finite.size}
        )
    return pd.DataFrame(out)


def summary(
    frame: pd.DataFrame,
    metric: str = "mu",
    *,
    start: int = 0,
    stop: int | None = None,
    floor: float = 1e-10,
) -> pd.DataFrame:
    """Per (config, mask, d_qk): mean log(metric) at the first and last layer, their difference and
    the fitted slope.

    Why: every verdict on a sweep reads these numbers (a net fall, a slope, an ordering
    at the last layer); one table keeps the notebooks short. Columns first, last,
    delta (= last - first) and slope (as in `rates`).
    """
    stats = log_stats(frame, metric)
    pick = lambda layer: stats[stats["layer"] == layer].set_index(GRID)["mean"]  # noqa: E731
    table = pd.DataFrame({"first": pick(stats["layer"].min()), "last": pick(stats["layer"].max())})
    table["delta"] = table["last"] - table["first"]
    table["slope"] = rates(frame, metric, start=start, stop=stop, floor=floor).set_index(GRID)[
        "slope"
    ]
    return table
