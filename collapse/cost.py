"""What a run costs: useful FLOPs of a sweep, and seconds from a rate measured here.

Why: the paper profile prints an ETA before it starts, from a rate measured on the
machine that will run it, not a guess.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch

from . import rng
from .checks import check_float, check_int
from .san import SANConfig

__all__ = ["grid_flops", "eta_seconds"]


def grid_flops(configs: Mapping[str, SANConfig], n_tokens: int, n_runs: int) -> float:
    """Useful FLOPs of a sweep: each config run on n_runs sequences (samples x masks x d_qk x
    seeds).

    Why: the paper profile prints an ETA before it starts. Counts
    2 x multiply-adds of the Q/K/V(/O) projections, scores, A V and, for "full", the FFN;
    softmax, LayerNorm and metrics are not counted.
    """
    n = check_int("n_tokens", n_tokens, minimum=1)
    total = 0.0
    for config in configs.values():
        d, f = config.d, config.ffn_width
        per_layer = 2 * n * d * d * (4 if config.out_proj else 3) + 4 * n * n * d
        if config.variant == "full":
            per_layer += 4 * n * d * f
        total += per_layer * config.n_layers
    return total * check_int("n_runs", n_runs, minimum=1)


def eta_seconds(
    flops: float, *, dtype=torch.float64, device=None, efficiency: float = 0.5
) -> float:
    """Seconds `flops` should take here: flops / (efficiency x a plain matmul's measured rate).

    Why: an ETA measured on the machine that will run the sweep, not a guess; the
    efficiency (the SAN's share of the matmul rate, the goal is >= 0.6) is a
    parameter because it varies with sizes and load. Takes about 0.1 s to measure.
    """
    efficiency = check_float("efficiency", efficiency, positive=True)
    g = rng.generator(0)
    A = torch.randn(1024, 768, generator=g, dtype=dtype).to(device)
    B = torch.randn(768, 768, generator=g, dtype=dtype).to(device)
    A @ B  # warm-up
    repeats, start = 5, time.perf_counter()
    for _ in range(repeats):
        C = A @ B
    if C.is_cuda:
        torch.cuda.synchronize()
    rate = repeats * 2 * 1024 * 768 * 768 / (time.perf_counter() - start)
    return float(flops) / (efficiency * rate)
