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
from .metrics import MU_ZERO
from .sweep import GRID

__all__ = [
    "curves",
    "curves_by",
    "log_stats",
    "rates",
    "at_layer",
    "summary",
    "temperature_effect",
    "relative_range",
    "summary_by",
    "mean_interval",
    "fall_ratios",
    "order_by",
    "spread_states",
]


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



def curves_by(frame: pd.DataFrame, column: str, values, metric: str = "mu", **select) -> dict:
    """`curves` for each value of one column, {value: (layers, runs)}: the input of a band
    per mask (`plotting.mask_bands`) or per temperature (`plotting.temperature_bands`).

    Examples
    --------
    >>> frame = pd.DataFrame({"config": "san", "mask": ["causal", "causal", "complete",
    ...     "complete"], "d_qk": 1.0, "seed": 0, "sample": 0, "layer": [0, 1, 0, 1],
    ...     "mu": [1.0, 0.5, 1.0, 0.1]})
    >>> {m: c.ravel().tolist() for m, c in curves_by(frame, "mask", ["complete"]).items()}
    {'complete': [1.0, 0.1]}
    """
    return {value: curves(frame, metric, **{column: value}, **select) for value in values}

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


def temperature_effect(frame: pd.DataFrame, cold: float, hot: float, metric: str = "mu"):
    """Mean log(metric) at the temperature `cold` minus at `hot`, per layer and mask: how
    much further apart a colder softmax keeps the tokens.

    Parameters
    ----------
    frame : pandas.DataFrame
        A sweep's frame with both temperatures in its d_qk column and one config.
    cold, hot : float
        The two d_QK values, as they appear in the frame.
    metric : str

    Returns
    -------
    pandas.DataFrame
        Rows the layers, columns the masks (in sorted order).

    Examples
    --------
    >>> frame = pd.DataFrame({"config": "san", "mask": "causal", "d_qk": [1.0, 1.0, 64.0, 64.0],
    ...     "seed": 0, "sample": 0, "layer": [0, 1, 0, 1], "mu": [1.0, 1.0, 1.0, np.exp(-2)]})
    >>> temperature_effect(frame, 1.0, 64.0)["causal"].round(6).tolist()
    [0.0, 2.0]
    """
    stats = log_stats(frame, metric).pivot_table(
        index=["layer", "mask"], columns="d_qk", values="mean"
    )
    return (stats[cold] - stats[hot]).unstack("mask")


def relative_range(table: pd.DataFrame) -> pd.Series:
    """(max - min) / |mean| of each row: how far values that should agree (a slope at several
    temperatures) spread, as a share of their size.

    Examples
    --------
    >>> relative_range(pd.DataFrame({"a": [1.0, -1.0], "b": [3.0, -1.2]})).round(3).tolist()
    [1.0, 0.182]
    """
    return (table.max(axis=1) - table.min(axis=1)) / table.mean(axis=1).abs()


def summary_by(frame: pd.DataFrame, column: str, metric: str = "mu") -> pd.DataFrame:
    """`summary` of each value of `column` on its own (e.g. each network seed, its mean over
    samples): index (column, config, mask, d_qk).

    Examples
    --------
    >>> frame = pd.DataFrame({"config": "ln", "mask": "causal", "d_qk": 64.0, "seed": [0, 0,
    ...     1, 1], "sample": 0, "layer": [0, 1, 0, 1], "mu": [1.0, np.exp(-1), 1.0, 1.0]})
    >>> summary_by(frame, "seed")["delta"].round(6).tolist()
    [-1.0, 0.0]
    """
    parts = {value: summary(rows, metric) for value, rows in frame.groupby(column)}
    return pd.concat(parts, names=[column])


def mean_interval(values, level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """The mean of the finite values and its Student t confidence interval: what a verdict
    over a few independently drawn networks can claim about the typical network.

    Parameters
    ----------
    values : array_like
        One number per independent draw; NaN and infinities are dropped.
    level : float
        The interval's confidence level.

    Returns
    -------
    mean : float
    (low, high) : tuple of float

    Examples
    --------
    >>> mean, (low, high) = mean_interval([1.0, 2.0, 3.0, np.nan])
    >>> float(mean), round(float(low), 3), round(float(high), 3)
    (2.0, -0.484, 4.484)
    """
    from scipy import stats

    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    half = stats.t.ppf((1 + level) / 2, values.size - 1) * values.std(ddof=1) / values.size**0.5
    return values.mean(), (values.mean() - half, values.mean() + half)


def fall_ratios(mu, *, cut: float = 1e-10, floor: float = MU_ZERO) -> np.ndarray:
    """Ratios Delta_{t+1} / Delta_t of successive falls Delta_t = log mu_{t-1} - log mu_t, per
    seed: about 1 when a collapse is exponential, growing (towards 2, 3...) when it is doubly
    exponential.

    Only pairs of positive falls that both end above cut * mu_0 count: below it float64
    rounding, not the dynamics, sets the falls.

    Parameters
    ----------
    mu : numpy.ndarray
        (layers, seeds) values of mu, or (layers,) for one run.
    cut : float
        mu_t / mu_0 below this is treated as collapsed.
    floor : float
        Exact zeros (and anything below) are read as this before the log.

    Returns
    -------
    numpy.ndarray
        The ratios of every kept pair, the seeds pooled (1-d).

    Examples
    --------
    >>> mu = np.exp(-np.array([[0.0], [1.0], [3.0], [7.0]]))  # falls 1, 2, 4
    >>> [round(float(r), 9) for r in fall_ratios(mu)]
    [2.0, 2.0]
    """
    log_mu = np.log(np.maximum(mu, floor))
    falls = log_mu[:-1] - log_mu[1:]  # (layer, seed)
    keep = (mu[1:] / mu[:1] > cut) & (falls > 0)
    pairs = keep[:-1] & keep[1:]
    return (falls[1:] / np.where(falls[:-1] > 0, falls[:-1], 1.0))[pairs]


def order_by(speed, keys, names, level: float = 0.95) -> pd.DataFrame:
    """Whether a rate falls as a key grows (a mask's diameter, say), read from paired seeds.

    The cases are grouped by key; for every two adjacent key values k < k', the slowest case
    of key k (smallest mean speed) is paired with the fastest of key k' (largest mean speed):
    if each such pair is ordered, every pair of different keys is. Each row gives the mean over
    seeds of the paired difference, faster minus slower, and its Student t interval
    (`mean_interval`): positive when the smaller key is faster.

    Parameters
    ----------
    speed : array_like
        (seed, case): a rate per seed and case, larger is faster (e.g. minus a slope).
    keys : array_like
        (case,): the ordering quantity, +inf allowed.
    names : sequence of str
        (case,): the cases' names.
    level : float
        The interval's confidence level.

    Returns
    -------
    pandas.DataFrame
        One row per adjacent pair of key values: faster, slower (names), key_faster,
        key_slower, difference, low, high.

    Examples
    --------
    >>> speed = np.array([[3.0, 2.0, 2.5, 1.0], [3.2, 2.2, 2.4, 0.9]])
    >>> rows = order_by(speed, [1, 2, 2, np.inf], ["a", "b", "c", "d"])
    >>> rows[["faster", "slower", "key_slower"]].values.tolist()
    [['a', 'c', 2.0], ['b', 'd', inf]]
    >>> [round(float(x), 6) for x in rows["difference"]]
    [0.65, 1.15]
    """
    speed, keys = np.asarray(speed, dtype=float), np.asarray(keys, dtype=float)
    if speed.ndim != 2 or speed.shape[1] != keys.size or len(names) != keys.size:
        raise ParameterError(
            f"speed must be (seed, case) with one key and name per case, got {speed.shape}, "
            f"{keys.size} keys, {len(names)} names"
        )
    mean, levels, rows = speed.mean(0), np.unique(keys), []
    for low_key, high_key in zip(levels[:-1], levels[1:], strict=True):
        low_group, high_group = np.flatnonzero(keys == low_key), np.flatnonzero(keys == high_key)
        i = low_group[mean[low_group].argmin()]
        j = high_group[mean[high_group].argmax()]
        difference, (low, high) = mean_interval(speed[:, i] - speed[:, j], level)
        rows.append({"faster": names[i], "slower": names[j], "key_faster": low_key,
                     "key_slower": high_key, "difference": difference, "low": low, "high": high})
    columns = ["faster", "slower", "key_faster", "key_slower", "difference", "low", "high"]
    return pd.DataFrame(rows, columns=columns)


def spread_states(states, n: int, cut: float = 1e-10):
    """n states of each trajectory, evenly spread over the layers where mu / mu_0 > cut.

    Why: along a collapsing run the tokens' shape changes as mu falls by many orders; a
    measure compared with mu should see the whole fall, but not the float64 floor below the
    cut, where rounding, not the dynamics, sets the tokens.

    Parameters
    ----------
    states : torch.Tensor
        (layer, ..., N, d): every layer's tokens of several runs.
    n : int
        States kept per run (the first and the last above the cut among them).
    cut : float
        The relative mu below which a state is left out.

    Returns
    -------
    torch.Tensor
        (n, ..., N, d).

    Examples
    --------
    >>> import torch
    >>> X = torch.eye(2, dtype=torch.float64) * torch.tensor([1.0, 0.5, 1e-12])[:, None, None]
    >>> spread_states(X, 2)[:, 0, 0].tolist()  # layers 0 and 1: layer 2 is below the cut
    [1.0, 0.5]
    """
    import torch

    from .metrics import mu

    n = check_int("n", n, minimum=1)
    values = mu(states)  # (layer, ...)
    above = values / values[:1] > cut
    last = (above.cumprod(0).sum(0) - 1).clamp(min=0)  # the last layer above the cut, per run
    picks = (torch.linspace(0, 1, n, dtype=torch.float64)[:, None] * last.reshape(1, -1)).round()
    picks = picks.long().reshape(n, *last.shape)  # (n, ...)
    index = picks[(...,) + (None,) * 2].expand(n, *states.shape[1:])
    return torch.gather(states, 0, index)
