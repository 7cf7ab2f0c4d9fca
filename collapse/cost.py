"""What a run costs: useful FLOPs of a sweep, and seconds from a rate measured here.

Why: the paper profile prints an ETA before it starts, from a rate measured on the
machine that will run it, not a guess.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from . import rng
from .checks import check_choice, check_float, check_int
from .san import SANConfig

__all__ = ["grid_flops", "dense_flops", "Work", "gemm_rate", "eta_seconds"]


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


# Leading-order FLOPs of dense n x n factorisations (Golub and Van Loan): singular values by
# bidiagonalisation, eigenvalues of a general matrix by Hessenberg and QR sweeps, symmetric
# eigenvalues by tridiagonalisation, Householder QR with its Q.
_DENSE = {"svdvals": 8 / 3, "eigvals": 10.0, "eigvalsh": 4 / 3, "qr": 8 / 3}


def dense_flops(kind: str, n: int) -> float:
    """FLOPs of one dense n x n factorisation: "svdvals", "eigvals", "eigvalsh" or "qr".

    Parameters
    ----------
    kind : str
        Which factorisation (values only, or QR with its Q).
    n : int
        The matrix's size.

    Returns
    -------
    float
        The leading-order count, a constant times n**3.

    Examples
    --------
    >>> dense_flops("eigvalsh", 3)
    36.0
    """
    return _DENSE[check_choice("kind", kind, tuple(_DENSE))] * check_int("n", n, minimum=1) ** 3


@dataclass(frozen=True)
class Work:
    """What a notebook's run asks of the machine, from its parameters alone (its `cost` cell).

    flops: useful floating-point operations; peak_bytes: the largest working set held at
    once; dtype: the precision its heavy arithmetic runs in (the GEMM rate it is timed
    against).
    """

    flops: float
    peak_bytes: float
    dtype: str = "float64"

    def __post_init__(self):
        check_float("flops", self.flops, minimum=0.0)
        check_float("peak_bytes", self.peak_bytes, minimum=0.0)
        check_choice("dtype", self.dtype, ("float32", "float64"))


def gemm_rate(dtype: str = "float64", device=None) -> float:
    """FLOP/s of a 2048 x 768 x 768 GEMM measured now on `device` (about 0.1 s on a CPU).

    Why: every ETA is a FLOP count over a rate measured on the machine that will run it.
    """
    dtype = getattr(torch, check_choice("dtype", dtype, ("float32", "float64")))
    g = rng.generator(0)
    A = torch.randn(2048, 768, generator=g, dtype=dtype).to(device)
    B = torch.randn(768, 768, generator=g, dtype=dtype).to(device)
    A @ B  # warm-up
    times = []
    for _ in range(5):
        start = time.perf_counter()
        C = A @ B
        if C.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 2 * 2048 * 768 * 768 / min(times)  # the best: load only ever slows it


def eta_seconds(
    flops: float, *, dtype=torch.float64, device=None, efficiency: float = 0.5
) -> float:
    """Seconds `flops` should take here: flops / (efficiency x a plain GEMM's measured rate).

    Why: an ETA measured on the machine that will run the sweep, not a guess; the
    efficiency (the share of the GEMM rate the work reaches) is a parameter because it
    varies with sizes and load.
    """
    efficiency = check_float("efficiency", efficiency, positive=True)
    return float(flops) / (efficiency * gemm_rate(str(dtype).removeprefix("torch."), device))
