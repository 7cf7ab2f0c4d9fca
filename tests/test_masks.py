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


def hand(*rows: str) -> torch.Tensor:
    """A mask written by hand, one string of 0/1 per query (spaces group a grid's rows)."""
    return torch.tensor([[c == "1" for c in row.replace(" ", "")] for row in rows])


def test_names_list_the_deployed_patterns():
    deployed = {"sink_window", "strided", "sparse_fixed", "longformer", "bigbird"}
    deployed |= {"neighborhood_2d", "slide_2d", "swin_2d"}
    assert deployed <= set(masks.names())
    for name in masks.names():
        assert masks.make(name, 16).diagonal().all()  # self-loops (A1) at the defaults


def test_sink_window_against_a_hand_built_mask():
    mask = masks.make("sink_window", 6, window=1, n_sink=2)
    expected = hand("100000", "110000", "111000", "111100", "110110", "110011")
    assert torch.equal(mask, expected)
    assert masks.centers(mask) == [0] and masks.radius(mask) == 1
    assert masks.diameter(mask) == math.inf  # causal: nothing flows back to token 0
    no_sink = masks.make("sink_window", 6, window=1, n_sink=0)
    assert torch.equal(no_sink, masks.make("causal_sliding_window", 6, window=1))
    # One sink makes the radius 1 however narrow the window.
    assert masks.radius(masks.make("sink_window", 128, window=0, n_sink=1)) == 1


def test_strided_against_a_hand_built_mask():
    mask = masks.make("strided", 8, stride=3)
    expected = hand(
        "10000000",
        "11000000",
        "11100000",
        "11110000",
        "01111000",
        "00111100",
        "10011110",
        "01001111",
    )
    assert torch.equal(mask, expected)
    assert masks.radius(mask) == 2 and masks.centers(mask) == [0]
    assert torch.equal(masks.make("strided", 8, stride=1), masks.make("causal", 8))
    assert torch.equal(masks.make("strided", 20), masks.make("strided", 20, stride=4))


def test_sparse_fixed_against_a_hand_built_mask():
    """Blocks of 4, the last position of each a summary: token 3 is seen by every later token,
    the rest of block 0 by block 0 alone."""
    mask = masks.make("sparse_fixed", 8, block=4, summary=1)
    expected = hand(
        "10000000",
        "11000000",
        "11100000",
        "11110000",
        "00011000",
        "00011100",
        "00011110",
        "00011111",
    )
    assert torch.equal(mask, expected)
    assert masks.radius(mask) == 2 and masks.centers(mask) == [0]
    two = masks.make("sparse_fixed", 8, block=4, summary=2)
    assert two[7].tolist() == [False, False, True, True, True, True, True, True]
    # Blocks of one token are all summaries, and one block is the whole causal mask.
    assert torch.equal(masks.make("sparse_fixed", 8, block=1), masks.make("causal", 8))
    assert torch.equal(masks.make("sparse_fixed", 8, block=8), masks.make("causal", 8))
    assert torch.equal(masks.make("sparse_fixed", 20), masks.make("sparse_fixed", 20, block=4))


@pytest.mark.parametrize("n", [64, 256, 1024])
def test_sparse_fixed_has_radius_two_like_strided(n):
    mask = masks.make("sparse_fixed", n, block=16, summary=2)
    assert masks.radius(mask) == 2 and masks.centers(mask) == [0]
    assert masks.diameter(mask) == math.inf


def test_longformer_against_a_hand_built_mask():
    mask = masks.make("longformer", 7, window=1, n_global=1, dilation=2)
    expected = hand(
        "1111111",
        "1101000",
        "1010100",
        "1101010",
        "1010101",
        "1001010",
        "1000101",
    )
    assert torch.equal(mask, expected)
    assert masks.radius(mask) == 1 and masks.diameter(mask) == 2
    # Without the global token the dilated window splits the tokens into two parities.
    assert masks.radius(masks.make("longformer", 7, window=1, n_global=0, dilation=2)) == math.inf
    assert torch.equal(
        masks.make("longformer", 12, window=2, n_global=3),
        masks.make("global_window", 12, window=2, n_global=3),
    )


def test_bigbird_without_random_keys_is_the_global_window():
    mask = masks.make("bigbird", 6, window=1, n_global=1, n_random=0)
    expected = hand("111111", "111000", "111100", "101110", "100111", "100011")
    assert torch.equal(mask, expected)
    # Asking for more random keys than are left gives every key.
    assert masks.make("bigbird", 6, window=1, n_global=1, n_random=6).all()


def test_bigbird_random_keys():
    base = masks.make("bigbird", 64, window=2, n_global=1, n_random=0)
    mask = masks.make("bigbird", 64, window=2, n_global=1, n_random=3, seed=5)
    assert torch.equal(mask & base, base)
    extra = (mask & ~base).sum(-1)
    assert extra[0] == 0 and (extra[1:] == 3).all()  # the global row already has every key
    assert torch.equal(mask, masks.make("bigbird", 64, window=2, n_global=1, n_random=3, seed=5))
    assert not torch.equal(mask, masks.make("bigbird", 64, window=2, n_global=1, n_random=3))
    # Over seeds, query 8's one random key lands on every key outside its window and globals.
    drawn = torch.stack(
        [masks.make("bigbird", 16, n_global=1, n_random=1, seed=s)[8] for s in range(300)]
    )
    outside = ~masks.make("bigbird", 16, n_global=1, n_random=0)[8]
    assert drawn[:, outside].any(0).all() and int(outside.sum()) == 12


def test_neighborhood_2d_against_a_hand_built_mask():
    mask = masks.make("neighborhood_2d", 16, kernel=3)
    top, bottom = "1110 1110 1110 0000", "0000 1110 1110 1110"  # rows 0-2, rows 1-3
    left_rows = [top, top, bottom, bottom]  # the window of grid rows 0, 1, 2, 3
    expected = hand(
        *(
            rows if col < 2 else rows.replace("1110", "0111")
            for rows in left_rows
            for col in range(4)
        )
    )
    assert torch.equal(mask, expected)


@pytest.mark.parametrize("side, kernel", [(7, 3), (7, 5), (8, 7), (5, 5)])
def test_neighborhood_2d_every_query_has_kernel_squared_keys(side, kernel):
    mask = masks.make("neighborhood_2d", side * side, kernel=kernel)
    assert (mask.sum(-1) == kernel**2).all()
    middle = (side // 2) * side + side // 2
    rows, cols = torch.nonzero(mask[middle].reshape(side, side), as_tuple=True)
    half = kernel // 2
    assert rows.min() == side // 2 - half and cols.max() == side // 2 + half  # centred inside
    if kernel == side:
        assert mask.all()


def test_slide_2d_against_a_hand_built_mask():
    """Kernel 3 on a 4 x 4 grid, the window cut at the border: a corner sees 4 keys, an edge
    token 6, an inner token 9 (Neighborhood Attention would give every token 9)."""
    mask = masks.make("slide_2d", 16, kernel=3)
    rows = {0: "1100 1100 0000 0000", 1: "1110 1110 0000 0000", 5: "1110 1110 1110 0000"}
    for query, keys in rows.items():
        assert torch.equal(mask[query], hand(keys)[0]), query
    grid = mask.sum(-1).reshape(4, 4)
    assert grid.tolist() == [[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]]
    assert torch.equal(mask, mask.T)  # cut windows are symmetric; NAT's shifted ones are not


@pytest.mark.parametrize("side, kernel", [(8, 3), (8, 5), (16, 3), (16, 7)])
def test_slide_2d_is_the_neighborhood_window_cut_at_the_border(side, kernel):
    slide = masks.make("slide_2d", side * side, kernel=kernel)
    nat = masks.make("neighborhood_2d", side * side, kernel=kernel)
    assert not (slide & ~nat).any()  # every key of a cut window is in the shifted window
    half = kernel // 2
    inner = [r * side + c for r in range(half, side - half) for c in range(half, side - half)]
    assert torch.equal(slide[inner], nat[inner])  # away from the border they are the same
    assert masks.radius(slide) == math.ceil((side // 2) / half)
    assert masks.radius(slide) >= masks.radius(nat)


def test_slide_2d_of_kernel_one_and_of_the_whole_grid():
    assert torch.equal(masks.make("slide_2d", 16, kernel=1), torch.eye(16, dtype=torch.bool))
    assert masks.make("slide_2d", 16, kernel=7).all()


def test_swin_2d_against_hand_built_masks():
    blocks = masks.make("swin_2d", 16, window=2)
    a, b = "1100 1100 0000 0000", "0011 0011 0000 0000"
    c, d = "0000 0000 1100 1100", "0000 0000 0011 0011"
    assert torch.equal(blocks, hand(a, a, b, b, a, a, b, b, c, c, d, d, c, c, d, d))
    shifted = masks.make("swin_2d", 16, window=2, shift=True)
    # Displaced by one: the row and column groups are {0}, {1, 2}, {3}; no wrap-around.
    top = ["1000 0000 0000 0000", "0110 0000 0000 0000", "0001 0000 0000 0000"]
    middle = ["0000 1000 1000 0000", "0000 0110 0110 0000", "0000 0001 0001 0000"]
    bottom = ["0000 0000 0000 1000", "0000 0000 0000 0110", "0000 0000 0000 0001"]
    rows = [[top[0], top[1], top[1], top[2]]]
    rows += [[middle[0], middle[1], middle[1], middle[2]]] * 2
    rows += [[bottom[0], bottom[1], bottom[1], bottom[2]]]
    assert torch.equal(shifted, hand(*(query for grid_row in rows for query in grid_row)))
    assert masks.radius(blocks) == math.inf and masks.radius(shifted) == math.inf
    assert torch.equal(masks.make("swin_2d", 16, window=4, shift=True), masks.make("complete", 16))


def swin_reference(side: int, window: int) -> torch.Tensor:
    """Swin's shifted-window mask the way microsoft/Swin-Transformer builds it: roll the grid by
    -window // 2, label the three regions per axis, attend within a window and a region."""
    shift = window // 2
    regions = np.zeros((side, side), dtype=int)
    slices = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    for k, (h, w) in enumerate((h, w) for h in slices for w in slices):
        regions[h, w] = k
    rolled = np.roll(np.arange(side * side).reshape(side, side), (-shift, -shift), axis=(0, 1))
    r, c = np.divmod(np.arange(side * side), side)
    key = ((r // window) * side + c // window) * 9 + regions.ravel()
    mask = np.zeros((side * side, side * side), dtype=bool)
    mask[np.ix_(rolled.ravel(), rolled.ravel())] = key[:, None] == key[None, :]
    return torch.from_numpy(mask)


@pytest.mark.parametrize("side, window", [(4, 2), (6, 3), (8, 4), (12, 4), (14, 7)])
def test_swin_2d_shift_matches_swins_roll_and_region_mask(side, window):
    shifted = masks.make("swin_2d", side * side, window=window, shift=True)
    assert torch.equal(shifted, swin_reference(side, window))


def test_compose_is_the_boolean_product_in_layer_order():
    first = hand("100", "110", "011")  # token i attends to i - 1 and itself
    second = hand("101", "011", "001")  # every token attends to token 2 and itself
    # After `first` then `second`, token i has read second's keys of i, then first's of those.
    assert torch.equal(masks.compose([first, second]), hand("111", "111", "011"))
    assert torch.equal(masks.compose([second, first]), hand("101", "111", "011"))
    assert torch.equal(masks.compose([first]), first) and masks.compose(first) is first
    assert torch.equal(masks.compose((first, second, first)), hand("111", "111", "111"))


def test_graph_functions_of_a_list_measure_one_period():
    period = [masks.make("swin_2d", 16, window=2), masks.make("swin_2d", 16, window=2, shift=True)]
    composed = masks.compose(period)
    assert composed[5].all()  # token (1, 1) reads all 16 after one period
    assert torch.equal(composed[0], hand("1100 1100 0000 0000")[0])  # a corner reads its block
    assert masks.radius(period) == masks.radius(composed) == 2  # in periods: 4 layers
    assert masks.centers(period) == masks.centers(composed) == list(range(16))
    assert masks.diameter(period) == 2 and masks.is_strongly_connected(period)
    np.testing.assert_array_equal(masks.distances(period), reference_distances(composed))


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
        (
            lambda: masks.make("sink_window", 6, n_sink=7),
            r"n_sink must be an int in \[0, n=6\], got 7",
        ),
        (lambda: masks.make("sink_window", 6, window=-1), "window must be an int >= 0"),
        (lambda: masks.make("strided", 8, stride=0), "stride must be an int >= 1"),
        (lambda: masks.make("longformer", 8, dilation=0), "dilation must be an int >= 1"),
        (lambda: masks.make("longformer", 8, n_global=-1), "n_global must be an int >= 0"),
        (lambda: masks.make("bigbird", 8, n_random=-1), "n_random must be an int >= 0"),
        (lambda: masks.make("bigbird", 8, seed=-1), "seed must be an int >= 0"),
        (lambda: masks.make("bigbird", 8, n_global=9), r"n_global must be an int in \[0, n=8\]"),
        (
            lambda: masks.make("neighborhood_2d", 10),
            r"n must be a square \(a sqrt\(n\) x sqrt\(n\) grid of tokens\), got 10",
        ),
        (
            lambda: masks.make("neighborhood_2d", 16, kernel=2),
            r"kernel must be an odd int in \[1, side=4\], got 2",
        ),
        (
            lambda: masks.make("neighborhood_2d", 16, kernel=5),
            r"kernel must be an odd int in \[1, side=4\], got 5",
        ),
        (lambda: masks.make("swin_2d", 15), "n must be a square"),
        (lambda: masks.make("slide_2d", 16, kernel=4), "kernel must be an odd int >= 1, got 4"),
        (
            lambda: masks.make("sparse_fixed", 16, block=4, summary=5),
            r"summary must be an int in \[1, block=4\], got 5",
        ),
        (
            lambda: masks.make("swin_2d", 16, window=3),
            "window must be an int >= 1 dividing the grid side 4, got 3",
        ),
        (lambda: masks.make("swin_2d", 16, shift=1), "shift must be True or False, got 1"),
        (
            lambda: masks.make("swin_2d", 16, kernel=3),
            "mask 'swin_2d' takes window, shift; unknown option 'kernel'",
        ),
        (lambda: masks.compose([]), "mask must be a tensor or a non-empty list of them"),
        (
            lambda: masks.compose([masks.make("causal", 3), masks.make("causal", 4)]),
            r"masks of a sequence must share one shape, got \(3, 3\) and \(4, 4\)",
        ),
        (
            lambda: masks.radius([masks.make("causal", 3), torch.ones(3, 3)]),
            "mask must be a torch.bool tensor",
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
    with pytest.raises(ParameterError, match=match) as error:
        call()
    assert "\n" not in str(error.value)  # one line, naming the parameter


def test_parameter_error_is_value_error():
    with pytest.raises(ValueError):
        masks.make("complete", -3)


@pytest.mark.parametrize(
    "mask",
    [
        masks.make("causal", 40),
        masks.make("bigbird", 40, window=2, n_global=1, n_random=3, seed=1),
        masks.make("sliding_window", 100),  # 3 % of pairs allowed: the breadth-first path
        [masks.make("swin_2d", 36, window=2), masks.make("swin_2d", 36, window=2, shift=True)],
    ],
    ids=["causal", "bigbird", "window", "swin-period"],
)
def test_distances_dense_and_sparse_paths_agree(mask):
    from scipy.sparse import csgraph, csr_matrix

    graph = csr_matrix(masks.compose(mask).numpy().T)
    expected = csgraph.shortest_path(graph, directed=True, unweighted=True)
    np.testing.assert_array_equal(masks.distances(mask), expected)
