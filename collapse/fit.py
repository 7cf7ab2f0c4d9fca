"""Fitted collapse rates: least-squares slopes of log mu against the layer index.

PAPERS.md fits only where mu / mu(0) > 1e-10, because float64 floors log mu near
-35 and the floor would flatten the slope.
"""

from __future__ import annotations

import numpy as np
import torch

from .checks import check_float, check_int

__all__ = ["log_slope", "loglog_slope", "floor_layer", "max_rise"]


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
    mu = (mu.numpy() if isinstance(mu, torch.Tensor) else np.asarray(mu, dtype=float)).astype(float)
    layers = np.arange(mu.shape[0], dtype=float).reshape((-1,) + (1,) * (mu.ndim - 1))
    stop = mu.shape[0] if stop is None else check_int("stop", stop, minimum=start + 1)
    in_range = (layers >= start) & (layers < stop)
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = in_range & (mu / mu[:1] > floor) & (mu > 0)
        log_mu = np.log(np.where(mu > 0, mu, 1.0))
    x = np.broadcast_to(layers, mu.shape)
    return _weighted_slope(x, log_mu, keep)


def loglog_slope(values, *, start: int = 1) -> np.ndarray:
    """Slope of log values against log layer over layers >= start (the log-log plots of Wu et al.)."""
    start = check_int("start", start, minimum=1)
    v = (values.numpy() if isinstance(values, torch.Tensor) else np.asarray(values, dtype=float)).astype(float)
    layers = np.arange(v.shape[0], dtype=float).reshape((-1,) + (1,) * (v.ndim - 1))
    keep = (layers >= start) & (v > 0)
    with np.errstate(divide="ignore"):
        return _weighted_slope(np.broadcast_to(np.log(np.maximum(layers, 1)), v.shape), np.log(np.where(v > 0, v, 1.0)), keep)


def floor_layer(mu, *, floor: float = 1e-10) -> np.ndarray:
    """First layer t at which mu(t) / mu(0) <= floor (NaN where it never gets there).

    Why: the slope alone hides *when* a mask collapses; Theorem 1's ordering by radius
    holds at finite depth only, and the layer at which each mask reaches the float64
    floor shows where the ordering turns over. mu: (L+1, *batch); result: batch.
    """
    floor = check_float("floor", floor, positive=True)
    mu = (mu.numpy() if isinstance(mu, torch.Tensor) else np.asarray(mu, dtype=float)).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        below = mu / mu[:1] <= floor
    first = below.argmax(axis=0).astype(float)
    return np.where(below.any(axis=0), first, np.nan)


def max_rise(mu, *, floor: float = 1e-10) -> np.ndarray:
    """Largest increase of log mu over any stretch of layers, max over t2 > t1 of log mu(t2) - log mu(t1).

    Why: Theorem 1 bounds mu only up to a constant C, so mu may grow for a while before
    it falls (a causal window spreads token 1 through the sequence); a least-squares
    slope over a short run then reflects that transient, not the asymptotic rate.
    Only layers with mu / mu(0) > floor count, as in `log_slope`, so that rounding
    noise on the float64 floor is not mistaken for a rise.
    mu: (L+1, *batch); result: batch (0 where log mu never increases).
    """
    floor = check_float("floor", floor, minimum=0.0)
    mu = (mu.numpy() if isinstance(mu, torch.Tensor) else np.asarray(mu, dtype=float)).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        above = (mu / mu[:1] > floor) & (mu > 0)
        log_mu = np.where(above, np.log(np.where(mu > 0, mu, 1.0)), -np.inf)
    lowest_so_far = np.minimum.accumulate(np.where(above, log_mu, np.inf), axis=0)
    with np.errstate(invalid="ignore"):
        rise = np.where(above, log_mu - lowest_so_far, 0.0)
    return np.maximum(rise.max(axis=0), 0.0)
