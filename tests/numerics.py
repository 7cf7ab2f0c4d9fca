"""Tolerances on a run's own scale.

A collapsing quantity (mu) falls by tens of orders of magnitude; two correct
computations of it (batched and one by one, two thread counts, two devices) differ by
rounding of the order of eps times the run's *initial* size, not its current one. A
relative tolerance on the collapsed value would compare rounding noise with itself.
"""

import numpy as np
import torch


def _float64(values) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.detach().to("cpu", torch.float64)
    return torch.from_numpy(np.array(values, dtype=np.float64))


def assert_close_to_scale(actual, expected, *, rtol: float = 1e-10) -> None:
    """|actual - expected| <= rtol * |expected at layer 0|, per run; layers along dim 0."""
    actual, expected = _float64(actual), _float64(expected)
    assert actual.shape == expected.shape, f"shapes differ: {actual.shape} and {expected.shape}"
    scale = expected[:1].abs()
    excess = (actual - expected).abs() - rtol * scale
    worst = int(excess.flatten().argmax())
    assert bool((excess <= 0).all()), (
        f"difference {float((actual - expected).abs().flatten()[worst]):.3g} exceeds "
        f"{rtol:g} x the run's layer-0 value {float(scale.expand_as(excess).flatten()[worst]):.3g}"
    )
