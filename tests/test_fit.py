import math

import numpy as np
import pytest
import torch

from collapse import fit
from collapse.checks import ParameterError


def test_log_slope_recovers_an_exponential_rate_per_column():
    t = np.arange(30, dtype=float)
    mu = np.stack([3.0 * np.exp(-0.5 * t), np.exp(0.1 * t)], axis=1)
    np.testing.assert_allclose(fit.log_slope(mu), [-0.5, 0.1], rtol=1e-12)
    np.testing.assert_allclose(fit.log_slope(torch.tensor(mu)), [-0.5, 0.1], rtol=1e-12)


def test_log_slope_ignores_the_float64_floor():
    t = np.arange(100, dtype=float)
    mu = np.maximum(np.exp(-1.0 * t), 1e-16)  # falls at rate -1, then sits on a floor
    assert fit.log_slope(mu) == pytest.approx(-1.0)  # only layers with mu / mu(0) > 1e-10 count
    assert fit.log_slope(mu, floor=0.0) > -0.5  # without the cut the floor flattens the fit


def test_log_slope_window_and_too_few_points():
    t = np.arange(20, dtype=float)
    mu = np.where(t < 10, np.exp(-t), np.exp(-10 - 3 * (t - 10)))
    assert fit.log_slope(mu, start=10, floor=0.0) == pytest.approx(-3.0)
    assert fit.log_slope(mu, stop=10) == pytest.approx(-1.0)
    assert math.isnan(
        fit.log_slope(np.array([1.0, 1e-20, 1e-20]))
    )  # a single point above the floor


def test_loglog_fit_recovers_a_power_law_with_r2():
    T = np.array([20.0, 40.0, 80.0, 160.0])
    line = fit.loglog_fit(T, 3 * T**0.7)
    assert line.slope == pytest.approx(0.7) and line.intercept == pytest.approx(math.log(3))
    assert line.r2 == pytest.approx(1.0) and line.n == 4
    assert fit.loglog_fit(T, [1.0, 2.0, 1.0, 2.0]).r2 < 0.5
    # the same numbers as numpy's own least squares on the logs
    slope, intercept = np.polyfit(np.log(T), np.log([1.0, 2.0, 1.5, 2.5]), 1)
    line = fit.loglog_fit(T, [1.0, 2.0, 1.5, 2.5])
    assert line.slope == pytest.approx(slope, rel=1e-12) and line.intercept == pytest.approx(
        intercept
    )


def test_loglog_fit_per_column_leaves_out_points_without_a_logarithm():
    T = np.array([10.0, 20.0, 40.0, 80.0])
    values = np.stack([3 * T**2, 0.5 * T**1.5, [1.0, 0.0, -1.0, np.nan]], axis=1)
    values[0, 1] = np.nan
    line = fit.loglog_fit(T, values)
    np.testing.assert_allclose(line.slope[:2], [2.0, 1.5])
    np.testing.assert_allclose(line.intercept[:2], [math.log(3), math.log(0.5)])
    assert line.n.tolist() == [4, 3, 1]
    assert np.isnan(line.slope[2]) and np.isnan(line.intercept[2]) and np.isnan(line.r2[2])


def test_floor_layer_is_the_first_layer_below_the_floor():
    mu = np.array([[1.0, 2.0, 5.0], [1e-3, 1.0, 5.0], [1e-11, 1e-12, 4.0], [1e-16, 1e-15, 3.0]])
    out = fit.floor_layer(mu)
    assert out[:2].tolist() == [2.0, 2.0] and math.isnan(out[2])
    assert fit.floor_layer(mu, floor=1e-2)[0] == 1.0
    assert fit.floor_layer(torch.tensor(mu[:, 0])) == 2.0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: fit.log_slope(np.ones(3), floor=-1.0), "floor must be a number >= 0"),
        (lambda: fit.log_slope(np.ones(3), start=-1), "start must be an int >= 0"),
        (lambda: fit.log_slope(np.ones(3), start=2, stop=2), "stop must be an int >= 3"),
        (lambda: fit.loglog_fit([1.0, 2.0], [1.0, 2.0, 3.0]), "same length"),
        (lambda: fit.loglog_fit([0.0, 2.0], [1.0, 2.0]), "x must be finite and > 0"),
        (lambda: fit.floor_layer(np.ones(3), floor=0.0), "floor must be a number > 0"),
        (lambda: fit.max_rise(np.ones(3), floor=-1.0), "floor must be a number >= 0"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ParameterError, match=match):
        call()


def test_max_rise_measures_a_transient_before_the_fall():
    log_mu = np.array([[2.0, 0.0], [1.0, -1.0], [1.8, -2.0], [1.5, -3.0], [-5.0, -4.0]])
    np.testing.assert_allclose(
        fit.max_rise(np.exp(log_mu)), [0.8, 0.0]
    )  # 1.0 -> 1.8; the second falls throughout
    assert fit.max_rise(torch.tensor(np.exp(log_mu[:, 0]))) == pytest.approx(0.8)


def test_max_rise_ignores_noise_on_the_floor():
    log_mu = np.array(
        [0.0, -1.0, -36.0, -35.0, -36.5, -35.2]
    )  # rounding noise at the float64 floor
    assert fit.max_rise(np.exp(log_mu)) == 0.0
    assert fit.max_rise(np.exp(log_mu), floor=0.0) == pytest.approx(1.3)
