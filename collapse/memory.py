"""The Recurrent Memory Transformer (RMT) as a toy self-attention network: the sequence cut
into segments that the same L layers process in turn, beside memory tokens whose output is
the next segment's memory, the only path from one segment to the next.

Bulatov et al. (NeurIPS 2022, arXiv:2207.06881) give a decoder (`decoder=True`): each step's
input is [memory, segment, memory], under the model's own causal mask, so that every token
sees the read memory in front and the write memory at the back sees everything; the write
memory's output is the next memory. Their encoder version, which Bulatov et al. (2023,
arXiv:2304.11062) scale to a million tokens with BERT (`decoder=False`), puts the memory in
front only, under full attention, and carries its output. The weights of the L layers are
the same for every segment (the model is recurrent); the first memory is drawn like a token.

`unrolled_masks` writes the whole computation's graph over every token it ever holds, one
mask per layer: the step's tokens attend as in the step, every other token to itself alone.
It is the graph Theorem 1 would be asked about (run as one network, the tokens outside their
step would also be turned by each layer's value matrix, which the graph does not see):
`unrolled_radius` counts the layers until some token (a center) has reached every token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.sparse import csr_matrix

from . import mask_design as _mask_design
from . import masks as _masks
from . import metrics as _metrics
from . import san as _san
from . import theory as _theory
from .checks import ParameterError, check_int

__all__ = ["Layout", "run", "seen_so_far", "value_product", "unrolled_masks", "unrolled_radius"]


@dataclass(frozen=True)
class Layout:
    """One step of an RMT: `segment` tokens beside `memory` memory tokens, as in its decoder
    ([read memory, segment, write memory], causal) or its encoder ([memory, segment], full).

    Examples
    --------
    >>> step = Layout(segment=4, memory=2)
    >>> step.n, step.tokens, step.write
    (8, slice(2, 6, None), slice(6, 8, None))
    >>> Layout(segment=4, memory=2, decoder=False).write
    slice(0, 2, None)
    """

    segment: int
    memory: int
    decoder: bool = True

    def __post_init__(self):
        check_int("segment", self.segment, minimum=1)
        check_int("memory", self.memory, minimum=1)
        if not isinstance(self.decoder, bool):
            raise ParameterError(f"decoder must be True or False, got {self.decoder!r}")

    @property
    def n(self) -> int:
        """Tokens of one step."""
        return self.segment + (2 if self.decoder else 1) * self.memory

    @property
    def tokens(self) -> slice:
        """Where the segment's tokens sit in a step."""
        return slice(self.memory, self.memory + self.segment)

    @property
    def write(self) -> slice:
        """Where the next memory is read off a step's output."""
        return slice(self.n - self.memory, self.n) if self.decoder else slice(0, self.memory)

    def mask(self, device=None) -> torch.Tensor:
        """The mask of one step: causal (decoder) or complete (encoder)."""
        return _masks.make("causal" if self.decoder else "complete", self.n, device=device)

    def inputs(self, memory: torch.Tensor, segment: torch.Tensor) -> torch.Tensor:
        """A step's input: (..., n, d) from the memory (..., m, d) and the segment (..., S, d)."""
        parts = [memory, segment, memory] if self.decoder else [memory, segment]
        return torch.cat(parts, dim=-2)


@torch.inference_mode()
def run(X, memory0, config, layout: Layout, seeds, d_qk: float) -> dict:
    """The RMT of `layout` on segments X (seed, K, S, d) from the first memory (seed, m, d),
    with the L layers `san.init_layers(config, seeds)` draws shared by every segment.

    Returns
    -------
    dict
        "mu" (L+1, K, seed): mu of each step's n tokens after every layer; "outputs"
        (seed, K, S, d): each segment's tokens after its step; "memory" (K+1, seed, m, d):
        the memory before each step and the last one; "epsilon" (seed,): the smallest
        attention weight on an edge of the step mask over every layer and segment.
    """
    if X.ndim != 4 or X.shape[2] != layout.segment or memory0.shape[-2] != layout.memory:
        raise ParameterError(
            f"X must be (seed, segments, {layout.segment}, d) and memory0 (seed, "
            f"{layout.memory}, d); got {tuple(X.shape)} and {tuple(memory0.shape)}"
        )
    layers = list(_san.init_layers(config, list(seeds), dtype=X.dtype))
    mask, memory = layout.mask(X.device), memory0
    mu, outputs, memories, eps = [], [], [memory0], []
    for k in range(X.shape[1]):
        H = layout.inputs(memory, X[:, k])
        history = [_metrics.mu(H)]
        for w in layers:
            H, A = _san.apply_layer(H, w, config, mask, math.sqrt(d_qk))
            history.append(_metrics.mu(H))
            eps.append(_theory.epsilon(A, mask.unsqueeze(-3)).amin(-1))
        memory = H[:, layout.write]
        mu.append(torch.stack(history))
        outputs.append(H[:, layout.tokens])
        memories.append(memory)
    return {
        "mu": torch.stack(mu, dim=1).numpy(),
        "outputs": torch.stack(outputs, dim=1),
        "memory": torch.stack(memories),
        "epsilon": torch.stack(eps).amin(0).double().numpy(),
    }


def seen_so_far(outputs: torch.Tensor) -> dict[str, np.ndarray]:
    """mu of every token output so far, and its parts within and between the segments
    (`mask_design.component_spread`), after each segment: each (K, seed), row s - 1 for the
    first s segments of `outputs` (seed, K, S, d).

    Why: collapse across segments would bring every segment's tokens to one point; collapse
    within each segment alone leaves the segments' means apart (the part between).
    """
    K, S = outputs.shape[1], outputs.shape[2]
    parts = {"mu": [], "within": [], "between": []}
    for s in range(1, K + 1):
        seen = outputs[:, :s].flatten(1, 2)  # (seed, s S, d)
        within, between = _mask_design.component_spread(seen, np.repeat(np.arange(s), S))
        for key, value in zip(parts, (_metrics.mu(seen), within, between), strict=True):
            parts[key].append(value.numpy())
    return {key: np.stack(values) for key, values in parts.items()}


def value_product(config, seeds) -> torch.Tensor:
    """R = W_V^(1) ... W_V^(L), (seed, d, d): the value matrices of the L layers `run` draws,
    in layer order (tokens are rows, weights act on the right).

    Why: a token that attends only to itself leaves a step as x R. In the decoder the first
    read-memory token does, and every token of the step collapses onto it, so the mean of
    one segment's outputs is about the previous segment's times R: segments do not agree.
    """
    seeds = list(seeds)
    product = torch.eye(config.d, dtype=torch.float64).expand(len(seeds), -1, -1)
    for w in _san.init_layers(config, seeds):
        product = product @ w.W_V
    return product


def _positions(layout: Layout, step: int) -> torch.Tensor:
    """Where step `step`'s tokens sit among every token of the unrolled computation, in the
    step's order: the decoder's write memory of one step is the next step's read memory."""
    m, S = layout.memory, layout.segment
    if layout.decoder:  # [first memory, (segment, write memory) per step]
        return torch.arange(step * (S + m), step * (S + m) + layout.n)
    return torch.cat([torch.arange(m), m + step * S + torch.arange(S)])  # [memory, segments]


def unrolled_masks(layout: Layout, n_segments: int, n_layers: int) -> list[torch.Tensor]:
    """The RMT's computation as one network over every token it holds (the first memory, each
    segment, and in the decoder each step's write memory): one (T, T) mask per layer, K L in
    all, in which the step's tokens attend as in the step and every other token to itself.

    Why: the graph Theorem 1 would be asked about. In the decoder a step's write memory
    starts as a copy of its read memory, an edge the step's first causal layer gives anyway
    (the write memory sees the read memory); the graph leaves the copy out.

    Examples
    --------
    >>> masks = unrolled_masks(Layout(segment=2, memory=1), n_segments=2, n_layers=1)
    >>> [m.shape[0] for m in masks], masks[1][3:, :3].any().item()
    ([7, 7], False)
    """
    n_segments = check_int("n_segments", n_segments, minimum=1)
    n_layers = check_int("n_layers", n_layers, minimum=1)
    extra = layout.memory if layout.decoder else 0
    total = layout.memory + n_segments * (layout.segment + extra)
    sequence = []
    for step in range(n_segments):
        mask = torch.eye(total, dtype=torch.bool)
        where = _positions(layout, step)
        mask[where[:, None], where[None, :]] = layout.mask()
        sequence += [mask] * n_layers
    return sequence


def unrolled_radius(sequence) -> tuple[int | float, list[int]]:
    """The layers, from the first on, until some token has reached every token through the
    masks of `sequence` in turn (not cycled), and the tokens that have then (the centers);
    (math.inf, []) when none does by the last layer.

    Examples
    --------
    >>> unrolled_radius(unrolled_masks(Layout(segment=2, memory=1), 3, n_layers=2))
    (5, [0])
    """
    sequence = _masks.as_sequence(sequence)
    n = sequence[0].shape[-1]
    reach = csr_matrix(np.eye(n, dtype=np.float32))  # [i, j]: token j has reached token i
    for layers, mask in enumerate(sequence, start=1):
        reach = ((csr_matrix(mask.numpy().astype(np.float32)) @ reach) > 0).astype(np.float32)
        everyone = np.asarray(reach.sum(axis=0)).ravel() == n
        if everyone.any():
            return layers, [int(j) for j in np.flatnonzero(everyone)]
    return math.inf, []
