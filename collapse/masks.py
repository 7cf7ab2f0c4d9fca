"""Attention masks and the directed graphs they define.

`mask[i, j]` is True when token i may attend to token j. Following Wu et al., the
mask graph has an edge j -> i for every allowed pair, so information flows from j
to i; a *center* is a token from which every token can be reached, and the radius
(the quantity in Theorems 1 and 2) is the smallest eccentricity over centers.
Every mask built here has self-loops (assumption A1).
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import torch
from scipy.sparse import csgraph, csr_matrix

from .checks import ParameterError, check_int

__all__ = [
    "make",
    "names",
    "check_mask",
    "distances",
    "centers",
    "radius",
    "diameter",
    "is_strongly_connected",
    "is_quasi_strongly_connected",
]


def _offsets(n: int, device) -> torch.Tensor:
    """offsets[i, j] = i - j: how far back token j lies from token i."""
    i = torch.arange(n, device=device)
    return i[:, None] - i[None, :]


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


def _global_window(n, device, window=1, n_global=1):
    """Sliding window plus `n_global` leading tokens that attend to, and are seen by, all."""
    n_global = check_int("n_global", n_global, minimum=0)
    if n_global > n:
        raise ParameterError(f"n_global must be an int in [0, n={n}], got {n_global}")
    mask = _sliding_window(n, device, window)
    mask[:n_global, :] = True
    mask[:, :n_global] = True
    return mask


_BUILDERS = {
    "complete": _complete,
    "causal": _causal,
    "sliding_window": _sliding_window,
    "causal_sliding_window": _causal_sliding_window,
    "dilated_sliding_window": _dilated_sliding_window,
    "global_window": _global_window,
}


def names() -> tuple[str, ...]:
    """Names accepted by `make`."""
    return tuple(_BUILDERS)


def make(name: str, n: int, *, device=None, **kw) -> torch.Tensor:
    """Build the named n x n boolean mask; `kw` are the mask's own options (e.g. window)."""
    if name not in _BUILDERS:
        raise ParameterError(f"mask must be one of {', '.join(_BUILDERS)}; got {name!r}")
    n = check_int("n", n, minimum=1)
    builder = _BUILDERS[name]
    allowed = [p for p in inspect.signature(builder).parameters if p not in ("n", "device")]
    unknown = sorted(set(kw) - set(allowed))
    if unknown:
        options = ", ".join(allowed) if allowed else "no options"
        raise ParameterError(f"mask {name!r} takes {options}; unknown option {unknown[0]!r}")
    return builder(n, device, **kw)


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


def _graph(mask: torch.Tensor) -> csr_matrix:
    """Sparse adjacency of the mask graph: entry [j, i] for the edge j -> i."""
    mask = check_mask(mask)
    if mask.ndim != 2:
        raise ParameterError(
            f"graph functions take one mask of shape (n, n), got {tuple(mask.shape)}"
        )
    return csr_matrix(mask.cpu().numpy().T)


def distances(mask: torch.Tensor) -> np.ndarray:
    """dist[j, i]: fewest edges on a path j -> i (inf when i cannot be reached from j)."""
    return csgraph.shortest_path(_graph(mask), directed=True, unweighted=True)


def _eccentricities(mask: torch.Tensor) -> np.ndarray:
    return distances(mask).max(axis=1)


def centers(mask: torch.Tensor) -> list[int]:
    """Tokens (0-based) from which every token can be reached."""
    return [int(j) for j in np.flatnonzero(np.isfinite(_eccentricities(mask)))]


def radius(mask: torch.Tensor) -> int | float:
    """min over centers of the farthest distance from it; math.inf without a center."""
    ecc = _eccentricities(mask)
    finite = ecc[np.isfinite(ecc)]
    return int(finite.min()) if finite.size else math.inf


def diameter(mask: torch.Tensor) -> int | float:
    """Largest directed distance; math.inf unless the graph is strongly connected."""
    dist = distances(mask)
    return int(dist.max()) if np.isfinite(dist).all() else math.inf


def is_strongly_connected(mask: torch.Tensor) -> bool:
    """Every ordered pair of tokens is joined by a directed path."""
    n_components = csgraph.connected_components(_graph(mask), directed=True, connection="strong")[
        0
    ]
    return n_components == 1


def is_quasi_strongly_connected(mask: torch.Tensor) -> bool:
    """Some token (a center) reaches every token: the condition of Theorem 1."""
    return bool(centers(mask))
