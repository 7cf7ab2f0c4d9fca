import math

import numpy as np
import pytest
import torch

from collapse import analysis
from collapse.checks import ParameterError


def test_order_by_pairs_the_slowest_of_each_key_with_the_fastest_of_the_next():
    speed = np.array(
        [[3.0, 2.0, 2.5, 1.0, 0.5], [3.2, 2.2, 2.4, 0.9, 0.6], [3.1, 1.9, 2.6, 1.1, 0.4]]
    )
    rows = analysis.order_by(speed, [1, 2, 2, math.inf, math.inf], list("abcde"))
    # key 1 against the fastest of key 2 (c); the slowest of key 2 (b) against the fastest
    # of the infinite keys (d)
    assert rows[["faster", "slower"]].values.tolist() == [["a", "c"], ["b", "d"]]
    assert rows["key_slower"].tolist() == [2.0, math.inf]
    first = speed[:, 0] - speed[:, 2]
    mean, (low, high) = analysis.mean_interval(first)
    assert rows.loc[0, "difference"] == pytest.approx(first.mean())
    assert (rows.loc[0, "low"], rows.loc[0, "high"]) == pytest.approx((low, high))
    assert rows.loc[0, "low"] > 0  # a clearly ordered pair: the interval excludes 0
    # one key: nothing to order
    assert analysis.order_by(speed[:, :1], [1], ["a"]).empty


def test_order_by_names_a_bad_shape():
    with pytest.raises(ParameterError, match="one key and name per case"):
        analysis.order_by(np.ones((3, 2)), [1, 2, 3], ["a", "b", "c"])


def test_spread_states_stays_above_the_cut_and_keeps_the_first_state():
    scale = torch.tensor([1.0, 0.5, 0.25, 1e-3, 1e-11, 1e-13], dtype=torch.float64)
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    runs = torch.stack([X * scale[:, None, None], X * scale.flip(0)[:, None, None] * 0 + X], 1)
    picked = analysis.spread_states(runs, 3)  # (3, run, 2, 2)
    assert picked.shape == (3, 2, 2, 2)
    # run 0: above the cut up to layer 3, so layers 0, 2 (1.5 rounds to 2) and 3
    assert picked[:, 0, 0, 0].tolist() == [1.0, 0.25, 1e-3]
    # run 1 never falls: layers 0, 2 and 5 (2.5 rounds to 2), all the same state
    assert (picked[:, 1] == X).all()
