"""The runs of the rebuttal's open questions (collapse.rebuttal) on small known cases."""

import math

import numpy as np
import pytest
import torch

from collapse import counterexample as ce
from collapse import masks, rebuttal, rng


def test_bisect_narrows_to_adjacent_floats_around_the_change():
    low, high = rebuttal.bisect(lambda x: x > math.pi, 0.0, 4.0)
    assert low <= math.pi < high and np.nextafter(low, 5.0) == high


def test_end_state_tells_zero_from_a_common_token_and_from_no_collapse():
    run = {  # (layer, seed, mask): one seed, three masks
        "frobenius": np.array([[[1.0, 1.0, 1.0]], [[1e-12, 0.5, 0.5]]]),
        "relative_mu": np.array([[[0.5, 0.5, 0.5]], [[np.nan, 1e-12, 0.3]]]),
    }
    states = rebuttal.end_state(run, 1e-10)
    assert states.tolist() == [["zero", "common token", "not collapsed"]]


def test_the_linear_case_decays_at_the_second_eigenvalue():
    mask = masks.make("causal", 6)
    lam2 = rebuttal.second_eigenvalue(mask)
    X0 = torch.randn(2, 6, 6, generator=rng.generator(0), dtype=torch.float64)
    mu = rebuttal.linear_run(X0, mask[None], 30)[:, :, 0]  # 2^-30: above the floor
    rate = np.log(mu[-1] / mu[-11]) / 10  # per layer, late in the run
    assert rate == pytest.approx(math.log(lam2), rel=1e-3)


def test_rmsnorm_with_a_gain_is_scale_only_layernorm_with_diag_gain_times_w_v():
    X = ce.angle_grid_states(np.arange(7.5, 360.0, 15.0))  # none on the basin boundary
    W_V = ce.value_matrix(2, 2.0)
    rms, scale_only = rebuttal.rms_counterexample(X, W_V, (1.0, 0.5), 40)
    torch.testing.assert_close(rms, scale_only, rtol=0, atol=1e-10)
    rms_unit, _ = rebuttal.rms_counterexample(X, W_V, (1.0, 1.0), 40)
    torch.testing.assert_close(rms_unit, math.sqrt(2) * ce.iterate(X, W_V, 40), rtol=0, atol=1e-10)
