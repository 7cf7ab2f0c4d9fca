import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from collapse import masks
from collapse.checks import ParameterError


def reference_distances(mask: torch.Tensor) -> np.ndarray:
    """dist[j, i] by repeated boolean matrix products (independent of scipy's BFS)."""
    reach = mask.numpy().T.astype(np.int64)  # reach[j, i]: edge j -> i
    n = reach.shape[0]
    dist = np.full((n, n), np.inf)
    np.fill_diagonal(dist, 0)
    frontier = np.eye(n, dtype=np.int64)
    for k in range(1, n):
        frontier = np.minimum(frontier @ reach, 1)
        dist[(frontier > 0) & np.isinf(dist)] = k
    return dist


@pytest.mark.parametrize("n", [1, 2, 5, 16, 128])
def test_complete_and_causal(n):
    complete, causal = masks.make("complete", n), masks.make("causal", n)
    assert complete.all()
    assert torch.equal(causal, torch.tril(torch.ones(n, n, dtype=torch.bool)))
    expected = 0 if n == 1 else 1
    assert masks.radius(complete) == expected and masks.diameter(complete) == expected
    assert masks.radius(causal) == expected
    assert masks.centers(causal) == [0]
    assert masks.diameter(causal) == (0 if n == 1 else math.inf)
    assert masks.is_strongly_connected(complete)
    assert masks.is_strongly_connected(causal) == (n == 1)


@pytest.mark.parametrize("n", [2, 7, 16, 128, 129])
@pytest.mark.parametrize("w", [1, 2, 5])
def test_sliding_windows(n, w):
    sliding = masks.make("sliding_window", n, window=w)
    causal_sliding = masks.make("causal_sliding_window", n, window=w)
    # The middle token reaches both ends, ceil((n-1)/2) positions away, w positions per hop.
    assert masks.radius(sliding) == math.ceil(math.ceil((n - 1) / 2) / w)
    assert masks.diameter(sliding) == math.ceil((n - 1) / w)
    assert masks.radius(causal_sliding) == math.ceil((n - 1) / w)
    assert masks.diameter(causal_sliding) == math.inf
    assert masks.centers(causal_sliding) == [0]
    assert masks.is_quasi_strongly_connected(causal_sliding) and not masks.is_strongly_connected(
        causal_sliding
    )


def test_paper_table_radii():
    """r at N = 128 for the four masks of Wu et al."""
    radii = {
        name: masks.radius(masks.make(name, 128))
        for name in ["complete", "causal", "sliding_window", "causal_sliding_window"]
    }
    assert radii == {
        "complete": 1,
        "causal": 1,
        "sliding_window": 64,
        "causal_sliding_window": 127,
    }


def test_window_zero_is_identity():
    assert torch.equal(masks.make("sliding_window", 6, window=0), torch.eye(6, dtype=torch.bool))
    assert masks.radius(masks.make("sliding_window", 6, window=0)) == math.inf


def test_dilated_window():
    assert torch.equal(
        masks.make("dilated_sliding_window", 20, window=3, dilation=1),
        masks.make("sliding_window", 20, window=3),
    )
    dilated = masks.make("dilated_sliding_window", 20, window=2, dilation=3)
    assert dilated[10, 4] and dilated[10, 16] and not dilated[10, 9] and not dilated[10, 3]
    # Offsets that are multiples of 3 split the tokens into 3 residue classes: no center.
    assert masks.radius(dilated) == math.inf and not masks.is_quasi_strongly_connected(dilated)


@pytest.mark.parametrize("n", [3, 10, 128])
def test_global_window(n):
    mask = masks.make("global_window", n, window=1, n_global=2)
    assert mask[0].all() and mask[:, 1].all()
    assert masks.centers(mask)[:2] == [0, 1]
    assert masks.radius(mask) == 1
    assert masks.diameter(mask) == (1 if n == 3 else 2)


def test_path_graph_radius_and_infinite_diameter():
    # Token i attends to token i - 1: information flows 0 -> 1 -> 2 -> 3.
    mask = (torch.diag(torch.ones(3), -1) != 0) | torch.eye(4, dtype=torch.bool)
    assert masks.centers(mask) == [0]
    assert masks.radius(mask) == 3
    assert masks.diameter(mask) == math.inf


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 9).flatmap(
        lambda n: st.lists(st.booleans(), min_size=n * n, max_size=n * n).map(lambda v: (n, v))
    )
)
def test_graph_quantities_match_reference(case):
    n, values = case
    mask = torch.tensor(values).reshape(n, n) | torch.eye(n, dtype=torch.bool)
    dist = reference_distances(mask)
    np.testing.assert_array_equal(masks.distances(mask), dist)
    ecc = dist.max(axis=1)
    assert masks.centers(mask) == list(np.flatnonzero(np.isfinite(ecc)))
    expected_radius = ecc[np.isfinite(ecc)].min() if np.isfinite(ecc).any() else math.inf
    assert masks.radius(mask) == expected_radius
    assert masks.is_strongly_connected(mask) == bool(np.isfinite(dist).all())
    # r <= diam always; diam <= 2r holds for undirected graphs only (a directed cycle breaks it).
    assert masks.radius(mask) <= masks.diameter(mask)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: masks.make("complete", 0), "n must be an int >= 1"),
        (lambda: masks.make("complete", 2.0), "n must be an int >= 1"),
        (lambda: masks.make("complete", True), "n must be an int >= 1"),
        (lambda: masks.make("sliding_window", 8, window=-1), "window must be an int >= 0"),
        (lambda: masks.make("sliding_window", 8, window=1.5), "window must be an int >= 0"),
        (
            lambda: masks.make("dilated_sliding_window", 8, dilation=0),
            "dilation must be an int >= 1",
        ),
        (
            lambda: masks.make("global_window", 8, n_global=9),
            r"n_global must be an int in \[0, n=8\]",
        ),
        (lambda: masks.make("bidirectional", 8), "mask must be one of complete, causal"),
        (
            lambda: masks.make("causal", 8, window=2),
            "mask 'causal' takes no options; unknown option 'window'",
        ),
        (
            lambda: masks.make("sliding_window", 8, widow=2),
            "mask 'sliding_window' takes window; unknown option 'widow'",
        ),
        (lambda: masks.radius(torch.zeros(3, 3, dtype=torch.bool)), "mask row 0 allows no token"),
        (lambda: masks.radius(torch.ones(2, 2)), "mask must be a torch.bool tensor"),
        (
            lambda: masks.radius(torch.ones(2, 3, 3, dtype=torch.bool)),
            "graph functions take one mask",
        ),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ParameterError, match=match):
        call()


def test_parameter_error_is_value_error():
    with pytest.raises(ValueError):
        masks.make("complete", -3)
