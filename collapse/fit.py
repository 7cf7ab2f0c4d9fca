"""Fitted rates: slopes of log mu against the layer, and power laws fitted on log-log axes.

Collapse rates are fitted only where mu / mu(0) > 1e-10, because float64 floors log mu
near -35 and the floor would flatten the slope.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from .checks import ParameterError, check_float, check_int

__all__ = ["log_slope", "tail_slopes", "loglog_fit", "LogLogFit", "floor_layer", "max_rise"]


def _weighted_slope(x: np.ndarray, y: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Least-squares slope of y on x per column, over rows where `keep` (NaN if < 2 rows)."""
    w = keep.astype(float)
    count = w.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        x_mean = (w * x).sum(0) / count
        y_mean = (w * np.where(keep, y, 0)).sum(0) / count
        dx = np.where(keep, x - x_mean, 0)
        slope = (dx * np.where(keep, y - y_mean, 0)).sum(0) / (dx**2).sum(0)
    return np.where(count >= 2, slope, np.nan)


def log_slope(mu, *, floor: float = 1e-10, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Slope of log mu per layer, over layers start..stop where mu / mu(0) > floor.

    mu: (L+1, *batch) as returned by san.simulate; the result has shape batch.
    """
    floor = check_float("floor", floor, minimum=0.0)
    start = check_int("start", start, minimum=0)
    mu = (mu.numpy() if isinstance(mu, torch.Tensor) else np.asarray(mu, dtype=float)).astype(
        float
    )
    layers = np.arange(mu.shape[0], dtype=float).reshape((-1,) + (1,) * (mu.ndim - 1))
    stop = mu.shape[0] if stop is None else check_int("stop", stop, minimum=start + 1)
    in_range = (layers >= start) & (layers < stop)
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = in_range & (mu / mu[:1] > floor) & (mu > 0)
        log_mu = np.log(np.where(mu > 0, mu, 1.0))
    x = np.broadcast_to(layers, mu.shape)
    return _weighted_slope(x, log_mu, keep)


class LogLogFit(NamedTuple):
    """log y = slope log x + intercept per column; r2 its coefficient of determination, n the
    points it used. Each field has y's shape without its first (point) dim (floats for 1-D y)."""

    slope: np.ndarray
    intercept: np.ndarray
    r2: np.ndarray
    n: np.ndarray


def loglog_fit(x, y) -> LogLogFit:
    """Least-squares power law y ~ x^slope per column of y (points along dim 0).

    Why: "sr grows with T" and "the gradient grows like T^a" need a number, and how well a
    power law describes the points. Points where y is not finite and > 0 (a norm of exactly
    0, an overflow) have no logarithm: they are left out of their column, and `n` says how
    many remained; a column with fewer than two points gives NaN. x must be finite and > 0.
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float)
    if y.ndim == 0 or y.shape[0] != x.size or x.size < 2:
        raise ParameterError(
            f"x and y must have the same length >= 2 along dim 0, got {x.size} and {y.shape}"
        )
    if not np.all(np.isfinite(x) & (x > 0)):
        raise ParameterError("x must be finite and > 0 for a log-log fit")
    keep = np.isfinite(y) & (y > 0)
    lx = np.broadcast_to(np.log(x).reshape((-1,) + (1,) * (y.ndim - 1)), y.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        ly = np.where(keep, np.log(np.where(keep, y, 1.0)), 0.0)
        slope = _weighted_slope(lx, ly, keep)
        count = keep.sum(0)
        intercept = (np.where(keep, ly - slope * lx, 0.0)).sum(0) / count
        residual = np.where(keep, ly - slope * lx - intercept, 0.0)
        spread = np.where(keep, ly - np.where(keep, ly, 0).sum(0) / count, 0.0)
        r2 = 1.0 - (residual**2).sum(0) / (spread**2).sum(0)
    r2 = np.where(np.isfinite(slope) & ((spread**2).sum(0) > 0), r2, np.nan)
    fitted = LogLogFit(slope, np.where(np.isfinite(slope), intercept, np.nan), r2, count)
    return LogLogFit(*(float(v) for v in fitted)) if y.ndim == 1 else fitted


def floor_layer(mu, *, floor: float = 1e-10) -> np.ndarray:
    """First layer t at which mu(t) / mu(0) <= floor (NaN where it never gets there).

    Why: the slope alone hides *when* a mask collapses; Theorem 1's ordering by radius
    holds at finite depth only, and the layer at which each mask reaches the float64
    floor shows where the ordering turns over. mu: (L+1, *batch); result: batch.
    """
    floor = check_float("floor", floor, positive=True)
    mu = (mu.numpy() if isinstance(mu, torch.Tensor) else np.asarray(mu, dtype=float)).astype(
        float
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        below = mu / mu[:1] <= floor
    first = below.argmax(axis=0).astype(float)
    return np.where(below.any(axis=0), first, np.nan)


def max_rise(mu, *, floor: float = 1e-10) -> np.ndarray:
    """Largest increase of log mu over any stretch of layers, max over t2 > t1 of log mu(t2) - log
    mu(t1).

    Why: Theorem 1 bounds mu only up to a constant C, so mu may grow for a while before
    it falls (a causal window spreads token 1 through the sequence); a least-squares
    slope over a short run then reflects that transient, not the asymptotic rate.
    Only layers with mu / mu(0) > floor count, as in `log_slope`, so that rounding
    noise on the float64 floor is not mistaken for a rise.
    mu: (L+1, *batch); result: batch (0 where log mu never increases).
    """
    floor = check_float("floor", floor, minimum=0.0)
    mu = (mu.numpy() if isinstance(mu, torch.Tensor) else np.asarray(mu, dtype=float)).astype(
        float
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        above = (mu / mu[:1] > floor) & (mu > 0)
        log_mu = np.where(above, np.log(np.where(mu > 0, mu, 1.0)), -np.inf)
    lowest_so_far = np.minimum.accumulate(np.where(above, log_mu, np.inf), axis=0)
    with np.errstate(invalid="ignore"):
        rise = np.where(above, log_mu - lowest_so_far, 0.0)
    return np.maximum(rise.max(axis=0), 0.0)


def tail_slopes(mu) -> np.ndarray:
    """Slope of log mu over the tail of each run, the rate chapters 01 and 02 measure: the
    second half of the layers above the fit cut mu / mu(0) > 1e-10, at least two of them.

    Why the tail: a transient (mu rising while a token's value spreads) is absorbed by
    Theorem 1's constant, so only the decay after it can be held to the theorem's rate.

    mu: (L+1, *batch); result: batch.
    """
    mu = mu.numpy() if isinstance(mu, torch.Tensor) else np.asarray(mu, dtype=float)
    end = floor_layer(mu)  # first layer below the cut, NaN where none is
    end = np.where(np.isnan(end), mu.shape[0], end).astype(int)
    start = np.maximum(0, np.minimum(end // 2, end - 2))
    slope = np.empty(end.shape)
    for i in np.ndindex(end.shape):  # one fit per run: a handful of runs
        column = mu[(slice(None), *i)]
        slope[i] = log_slope(column, start=int(start[i]), stop=int(end[i]))
    return slope
