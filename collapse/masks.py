"""Attention masks and the directed graphs they define.

`mask[i, j]` is True when token i may attend to token j. Following Wu et al., the
mask graph has an edge j -> i for every allowed pair, so information flows from j
to i; a *center* is a token from which every token can be reached, and the radius
(the quantity in Theorems 1 and 2) is the smallest eccentricity over centers.
Every mask built here has self-loops (assumption A1).

Besides the masks of the theory, `make` builds those of deployed sparse-attention
models with their own parameters (the rebuttal of Wu et al. lists them). The 2-D
masks put the n tokens on a sqrt(n) x sqrt(n) grid, row-major (token i at row
i // side, column i % side). A stack may also cycle a list of masks over its layers
(Swin's shifted windows): `compose` gives the graph of one period, and every graph
function given such a list measures that graph, its distances counted in periods.

Every named mask is one record of `REGISTRY` (an `Entry`): its builder, its label for
figures and tables, and its colour and line style; `plotting.color_for` reads it too.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.sparse import csgraph, csr_matrix

from . import rng
from .checks import ParameterError, check_int

__all__ = [
    "Entry",
    "REGISTRY",
    "make",
    "names",
    "label",
    "check_mask",
    "as_sequence",
    "compose",
    "distances",
    "centers",
    "radius",
    "diameter",
    "is_strongly_connected",
    "is_quasi_strongly_connected",
]

# BigBird's random keys come from this stream of the seed ("mask" in ASCII), apart from the
# streams other draws take (inputs, weights), so one seed can serve both without correlation.
_RANDOM_KEYS_STREAM = 0x6D61736B


def _offsets(n: int, device) -> torch.Tensor:
    """offsets[i, j] = i - j: how far back token j lies from token i."""
    i = torch.arange(n, device=device)
    return i[:, None] - i[None, :]


def _check_count(name: str, value, n: int) -> int:
    """A number of leading tokens (global, sinks): an int in [0, n]."""
    value = check_int(name, value, minimum=0)
    if value > n:
        raise ParameterError(f"{name} must be an int in [0, n={n}], got {value}")
    return value


def _complete(n, device):
    return torch.ones(n, n, dtype=torch.bool, device=device)


def _causal(n, device):
    return _offsets(n, device) >= 0


def _sliding_window(n, device, window=1):
    return _offsets(n, device).abs() <= check_int("window", window, minimum=0)


def _causal_sliding_window(n, device, window=1):
    off = _offsets(n, device)
    return (off >= 0) & (off <= check_int("window", window, minimum=0))


def _dilated_sliding_window(n, device, window=1, dilation=2):
    """Attend to i + k*dilation for |k| <= window (Longformer's dilated window)."""
    window = check_int("window", window, minimum=0)
    dilation = check_int("dilation", dilation, minimum=1)
    off = _offsets(n, device)
    return (off.abs() <= window * dilation) & (off % dilation == 0)


def _with_global(mask: torch.Tensor, n_global) -> torch.Tensor:
    """Make the `n_global` leading tokens global: they attend to, and are seen by, all."""
    n_global = _check_count("n_global", n_global, mask.shape[-1])
    mask[:n_global, :] = True
    mask[:, :n_global] = True
    return mask


def _global_window(n, device, window=1, n_global=1):
    """Sliding window plus `n_global` leading tokens that attend to, and are seen by, all."""
    return _with_global(_sliding_window(n, device, window), n_global)


def _sink_window(n, device, window=1, n_sink=1):
    """StreamingLLM (Xiao et al., ICLR 2024, arXiv:2309.17453): a causal window i-window..i
    plus the first `n_sink` tokens, the attention sinks, kept for every later query.

    The paper keeps 4 sinks beside a rolling cache of recent tokens (`window` here).
    """
    sinks = torch.arange(n, device=device) < _check_count("n_sink", n_sink, n)
    return _causal_sliding_window(n, device, window) | (_causal(n, device) & sinks)


def _strided(n, device, stride=None):
    """The strided pattern of the Sparse Transformer (Child et al. 2019, arXiv:1904.10509):
    causal, j <= i with i - j < stride or (i - j) a multiple of stride.

    This is the union of the paper's two factorised heads (its "merged" head); the
    paper takes stride close to sqrt(n), the default (floor of sqrt(n)).
    """
    stride = math.isqrt(n) if stride is None else check_int("stride", stride, minimum=1)
    off = _offsets(n, device)
    return (off >= 0) & ((off < stride) | (off % stride == 0))


def _longformer(n, device, window=1, n_global=1, dilation=1):
    """Longformer (Beltagy et al. 2020, arXiv:2004.05150): a (dilated) window of `window`
    keys on each side plus `n_global` global tokens that attend to and are seen by all.

    Longformer's attention window w is w/2 keys per side (`window` = w/2); its global
    tokens are chosen per task ([CLS], the question): here they are the leading tokens.
    """
    return _with_global(_dilated_sliding_window(n, device, window, dilation), n_global)


def _bigbird(n, device, window=1, n_global=1, n_random=1, seed=0):
    """BigBird-ITC (Zaheer et al., NeurIPS 2020, arXiv:2007.14062): a window of `window`
    keys per side, `n_global` leading global tokens and `n_random` random keys per query.

    Token-level, where BigBird works on blocks of 64 tokens: with blocks of one token,
    its 3 window, 2 global and 3 random blocks are window=1, n_global=2, n_random=3
    (its global blocks are the first and the last; here, as for Longformer, the leading
    tokens). As in its block code, the random keys of a query are distinct and drawn
    among the keys the window and the globals leave out (all of them when fewer remain);
    the draw comes from `seed` alone (collapse.rng), the same mask on any device.
    """
    mask = _global_window(n, device, window, n_global)
    n_random = check_int("n_random", n_random, minimum=0)
    scores = torch.rand(
        n, n, generator=rng.generator(seed, _RANDOM_KEYS_STREAM), dtype=torch.float64
    )
    scores[mask.cpu()] = -1.0  # allowed keys rank last: drawn only when nothing else is left
    keys = scores.topk(min(n_random, n), dim=-1).indices.to(mask.device)
    return mask.scatter(-1, keys, True)


def _sparse_fixed(n, device, block=None, summary=1):
    """The "fixed" pattern of the Sparse Transformer (Child et al. 2019, arXiv:1904.10509):
    causal, j <= i with j in the block of `block` tokens that holds i, or j one of the last
    `summary` positions of its block (a "summary" position, which every later token sees).

    The union of the paper's two heads (A1, the own block; A2, the summary positions),
    merged as `strided` merges its two; the paper takes blocks of l = 128 or 256 tokens with
    c = 8 to 32 summary positions; the default block is floor(sqrt(n)), as for `strided`.
    """
    block = math.isqrt(n) if block is None else check_int("block", block, minimum=1)
    summary = check_int("summary", summary, minimum=1)
    if summary > block:
        raise ParameterError(f"summary must be an int in [1, block={block}], got {summary}")
    i = torch.arange(n, device=device)
    same_block = (i[:, None] // block) == (i[None, :] // block)
    is_summary = i % block >= block - summary
    return (_offsets(n, device) >= 0) & (same_block | is_summary[None, :])


def _grid(n: int, device) -> tuple[int, torch.Tensor, torch.Tensor]:
    """The side of the grid of n tokens and every token's row and column."""
    side = math.isqrt(n)
    if side * side != n:
        raise ParameterError(f"n must be a square (a sqrt(n) x sqrt(n) grid of tokens), got {n}")
    i = torch.arange(n, device=device)
    return side, i // side, i % side


def _neighborhood_2d(n, device, kernel=3):
    """Neighborhood attention (Hassani et al., CVPR 2023, arXiv:2204.07143): each token
    attends to the `kernel` x `kernel` window centred on it, shifted inward at the borders
    (NATTEN's window start) so that every query has exactly kernel^2 keys.

    NAT uses kernel 7; the kernel must be odd and fit in the grid.
    """
    side, row, col = _grid(n, device)
    kernel = check_int("kernel", kernel, minimum=1)
    if kernel % 2 == 0 or kernel > side:
        raise ParameterError(f"kernel must be an odd int in [1, side={side}], got {kernel}")

    def near(x):  # along one axis: key j lies in the window of query i
        start = (x - kernel // 2).clamp(0, side - kernel)
        off = x[None, :] - start[:, None]
        return (off >= 0) & (off < kernel)

    return near(row) & near(col)


def _slide_2d(n, device, kernel=3):
    """Slide-Transformer's local attention (Pan et al., CVPR 2023, arXiv:2304.04237): each
    token attends to the `kernel` x `kernel` window centred on it, cut at the borders of the
    grid, so that a border query has fewer keys (a corner one (kernel // 2 + 1)^2), where
    Neighborhood Attention (`neighborhood_2d`) shifts the window inward and keeps kernel^2.

    Slide attention gathers the window by shifting the zero-padded feature map: a border
    query also scores the padded positions, whose keys and values are zero at the fixed
    shift. They are no tokens (no edge of the mask graph), so the mask leaves them out and
    the softmax runs over the real keys only. Slide-Swin uses kernel 3; it must be odd.
    """
    _, row, col = _grid(n, device)
    kernel = check_int("kernel", kernel, minimum=1)
    if kernel % 2 == 0:
        raise ParameterError(f"kernel must be an odd int >= 1, got {kernel}")

    def near(x):  # along one axis: key j lies within kernel // 2 of query i
        return (x[:, None] - x[None, :]).abs() <= kernel // 2

    return near(row) & near(col)


def _swin_2d(n, device, window=2, shift=False):
    """Swin's window attention (Liu et al., ICCV 2021, arXiv:2103.14030): tokens attend
    within non-overlapping `window` x `window` blocks of the grid.

    shift=True gives the shifted windows of alternate layers, as microsoft/Swin-Transformer
    computes them (cyclic shift by window // 2 plus its attention mask): blocks displaced
    by window // 2, the border ones partial, none wrapping around. Like Swin, no shift
    when one window covers the grid. Swin uses window 7; here it must divide the side.
    """
    side, row, col = _grid(n, device)
    window = check_int("window", window, minimum=1)
    if side % window:
        raise ParameterError(
            f"window must be an int >= 1 dividing the grid side {side}, got {window}"
        )
    if not isinstance(shift, bool):
        raise ParameterError(f"shift must be True or False, got {shift!r}")
    displacement = window // 2 if shift and window < side else 0
    block_row, block_col = ((x + window - displacement) // window for x in (row, col))
    return (block_row[:, None] == block_row[None, :]) & (block_col[:, None] == block_col[None, :])


@dataclass(frozen=True)
class Entry:
    """One named mask: how `make` builds it, and how every figure and table shows it, kept
    together so that adding a mask is one record in `REGISTRY`.

    builder(n, device, **options) builds the mask; `preset` fixes some of its options for
    this name (a variant such as a wider window); `label` is the name as the text writes
    it; `color` indexes `plotting.COLORS` (None: a figure colours it by its position) and
    `linestyle` is its matplotlib line style.
    """

    builder: Callable[..., torch.Tensor]
    label: str
    color: int | None = None
    linestyle: str | tuple = "-"
    preset: Mapping = field(default_factory=dict)


REGISTRY: dict[str, Entry] = {
    "complete": Entry(_complete, "complete", color=0),
    "causal": Entry(_causal, "causal", color=1),
    "sliding_window": Entry(_sliding_window, "sliding window", color=2),
    "causal_sliding_window": Entry(_causal_sliding_window, "causal sliding window", color=3),
    "dilated_sliding_window": Entry(_dilated_sliding_window, "dilated window", color=4),
    "global_window": Entry(_global_window, "global window", color=5),
    "sink_window": Entry(_sink_window, "sink window"),
    "strided": Entry(_strided, "strided"),
    "longformer": Entry(_longformer, "Longformer"),
    "bigbird": Entry(_bigbird, "BigBird"),
    "neighborhood_2d": Entry(_neighborhood_2d, "neighborhood (2-D)"),
    "swin_2d": Entry(_swin_2d, "Swin"),
    "sparse_fixed": Entry(_sparse_fixed, "Sparse fixed", color=7, linestyle=":"),
    "slide_2d": Entry(_slide_2d, "Slide (2-D)", color=7, linestyle="--"),
    # variants: a dilated window (i, i +- 2) plus one global token; a window of half-width 4
    "dilated_global": Entry(
        _longformer,
        "dilated + global",
        color=4,
        linestyle="-.",
        preset={"window": 1, "n_global": 1, "dilation": 2},
    ),
    "sliding_window_w4": Entry(
        _sliding_window,
        "sliding window ($w = 4$)",
        color=6,
        linestyle=(0, (5, 2, 1, 2)),
        preset={"window": 4},
    ),
}


def names() -> tuple[str, ...]:
    """Names accepted by `make`."""
    return tuple(REGISTRY)


def label(name: str) -> str:
    """The mask's name as the text writes it ('sliding window'), for figures and tables.

    Examples
    --------
    >>> label("causal_sliding_window"), label("sliding_window_w4")
    ('causal sliding window', 'sliding window ($w = 4$)')
    """
    return _entry(name).label


def _entry(name: str) -> Entry:
    if name not in REGISTRY:
        raise ParameterError(f"mask must be one of {', '.join(REGISTRY)}; got {name!r}")
    return REGISTRY[name]


def make(name: str, n: int, *, device=None, **kw) -> torch.Tensor:
    """The named attention mask: which keys each query may attend to.

    Parameters
    ----------
    name : str
        A record of `REGISTRY`: "complete", "causal", "sliding_window" (keys i-w..i+w),
        "causal_sliding_window" (keys i-w..i), the deployed sparse patterns, ...
    n : int
        Tokens, at least 1.
    device : torch.device or str, optional
        Where the mask is built.
    **kw
        The mask's own options, e.g. ``window=w`` (default 1) for the windows.

    Returns
    -------
    torch.Tensor
        Boolean, shape (n, n): entry [i, j] is True when token i may attend to token j;
        the diagonal is always True.

    Examples
    --------
    >>> make("causal_sliding_window", 4).int().tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    """
    entry = _entry(name)
    n = check_int("n", n, minimum=1)
    parameters = inspect.signature(entry.builder).parameters
    allowed = [p for p in parameters if p not in ("n", "device", *entry.preset)]
    unknown = sorted(set(kw) - set(allowed))
    if unknown:
        options = ", ".join(allowed) if allowed else "no options"
        raise ParameterError(f"mask {name!r} takes {options}; unknown option {unknown[0]!r}")
    return entry.builder(n, device, **entry.preset, **kw)


def check_mask(mask: torch.Tensor) -> torch.Tensor:
    """Raise unless `mask` is a boolean (..., n, n) tensor in which every row allows a token."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise ParameterError(
            f"mask must be a torch.bool tensor, got {type(mask).__name__} "
            f"{getattr(mask, 'dtype', '')}"
        )
    if mask.ndim < 2 or mask.shape[-1] != mask.shape[-2]:
        raise ParameterError(f"mask must have shape (..., n, n), got {tuple(mask.shape)}")
    empty = ~mask.any(-1)
    if bool(empty.any()):
        row = int(empty.nonzero()[0, -1])
        raise ParameterError(
            f"mask row {row} allows no token: every token must attend to at least one (self-loops)"
        )
    return mask


def as_sequence(mask) -> tuple[torch.Tensor, ...]:
    """A mask, or a list/tuple of masks cycled over layers, as a tuple of checked masks.

    Why: a tensor, even a stack (..., n, n), is one mask for every layer; only a list or
    a tuple is a per-layer sequence (layer l uses mask[l % len(mask)]).
    """
    sequence = tuple(mask) if isinstance(mask, (list, tuple)) else (mask,)
    if not sequence:
        raise ParameterError("mask must be a tensor or a non-empty list of them (one per layer)")
    for m in sequence:
        check_mask(m)
        if m.shape != sequence[0].shape:
            raise ParameterError(
                f"masks of a sequence must share one shape, got {tuple(sequence[0].shape)} "
                f"and {tuple(m.shape)}"
            )
    return sequence


def compose(mask) -> torch.Tensor:
    """The mask of one pass through a sequence of masks, in layer order: [i, j] is True when
    token j before the first layer reaches token i after the last (the boolean product
    mask[-1] @ ... @ mask[0]); a single mask is returned as is.

    Why: a stack cycling the sequence mixes tokens along this graph once per period, so
    its radius, counted in periods, plays the part of the mask's radius in Theorem 1.
    """
    sequence = as_sequence(mask)
    reach = sequence[0]
    for layer in sequence[1:]:  # float counts: bool tensors have no matmul
        reach = (layer.to(torch.float32) @ reach.to(torch.float32)) > 0
    return reach


# Above this share of allowed pairs, distances() advances every source at once (see there).
_DENSE_SHARE = 0.05


def _graph(mask) -> csr_matrix:
    """Sparse adjacency of the mask graph (of one period for a list): entry [j, i] for j -> i."""
    mask = compose(mask)
    if mask.ndim != 2:
        raise ParameterError(
            f"graph functions take one mask of shape (n, n), got {tuple(mask.shape)}"
        )
    return csr_matrix(mask.cpu().numpy().T)


def distances(mask) -> np.ndarray:
    """dist[j, i]: fewest edges on a path j -> i (inf when i cannot be reached from j).

    Why two paths: a breadth-first search per token is fast for sparse masks, but a dense
    mask of 1024 tokens has a million edges per search; there, all sources advance at
    once, one boolean matrix product per step.
    """
    m = compose(mask)
    n = m.shape[-1]
    if m.ndim != 2 or int(m.sum()) < _DENSE_SHARE * n * n:
        return csgraph.shortest_path(_graph(m), directed=True, unweighted=True)
    adjacency = m.T.to(torch.float32)  # [j, i]: the edge j -> i
    reached = torch.eye(n, dtype=torch.bool, device=m.device)
    frontier, dist, step = reached, np.full((n, n), np.inf), 0
    dist[reached.cpu().numpy()] = 0
    while frontier.any():
        step += 1
        frontier = ((frontier.to(torch.float32) @ adjacency) > 0) & ~reached
        reached |= frontier
        dist[frontier.cpu().numpy()] = step
    return dist


def _eccentricities(mask) -> np.ndarray:
    return distances(mask).max(axis=1)


def centers(mask) -> list[int]:
    """Tokens (0-based) from which every token can be reached."""
    return [int(j) for j in np.flatnonzero(np.isfinite(_eccentricities(mask)))]


def radius(mask) -> int | float:
    """The radius of the mask's graph (an edge j -> i when token i attends to j): the least,
    over tokens, of the farthest directed distance from that token to any other.

    Why: Theorem 1 of Wu et al. bounds the collapse rate by the radius; a token that
    reaches every other (a center) exists only when the radius is finite.

    Parameters
    ----------
    mask : torch.Tensor
        Boolean, shape (n, n), or a sequence of them (one per layer: their composed graph).

    Returns
    -------
    int or float
        The radius, or ``math.inf`` when no token reaches every other.

    Examples
    --------
    >>> radius(make("causal", 8)), radius(make("causal_sliding_window", 8))
    (1, 7)
    """
    ecc = _eccentricities(mask)
    finite = ecc[np.isfinite(ecc)]
    return int(finite.min()) if finite.size else math.inf


def diameter(mask) -> int | float:
    """The diameter of the mask's graph: the largest directed distance between two tokens.

    Parameters
    ----------
    mask : torch.Tensor
        Boolean, shape (n, n), or a sequence of them (one per layer).

    Returns
    -------
    int or float
        The diameter, or ``math.inf`` unless every token reaches every other (so for
        every causal mask).

    Examples
    --------
    >>> diameter(make("complete", 4)), diameter(make("causal", 4))
    (1, inf)
    """
    dist = distances(mask)
    return int(dist.max()) if np.isfinite(dist).all() else math.inf


def is_strongly_connected(mask) -> bool:
    """Every ordered pair of tokens is joined by a directed path."""
    n_components = csgraph.connected_components(_graph(mask), directed=True, connection="strong")[
        0
    ]
    return n_components == 1


def is_quasi_strongly_connected(mask) -> bool:
    """Some token (a center) reaches every token: the condition of Theorem 1."""
    return bool(centers(mask))
