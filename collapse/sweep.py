"""Grids of SAN configurations -> one tidy pandas DataFrame of per-layer metrics."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import pandas as pd
import torch
from tqdm.auto import tqdm

from .checks import ParameterError
from .san import SANConfig, simulate

__all__ = ["sweep"]


def _tidy(result, labels: dict, names: Sequence[str]) -> pd.DataFrame:
    first = result[names[0]]
    n_layers, batch = first.shape[0], first[0].numel()
    frame = pd.DataFrame(
        {
            "layer": torch.arange(n_layers).repeat_interleave(batch).numpy(),
            "sample": torch.arange(batch).repeat(n_layers).numpy(),
            **{name: result[name].reshape(n_layers * batch).numpy() for name in names},
        }
    )
    for column, value in labels.items():
        frame.insert(0, column, value)
    return frame


def sweep(
    X0: torch.Tensor,
    configs: Mapping[str, SANConfig],
    masks: Mapping[str, torch.Tensor],
    *,
    d_qk: Sequence[float | None] = (None,),
    metrics: Sequence[str] = ("mu",),
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Simulate every (config, mask, d_qk) on the same inputs and weights seed.

    Returns columns config, mask, d_qk, layer, sample and one per metric. The seed is
    shared, so configurations differ only in what they name (paired comparisons).
    d_qk None means the head width.
    """
    if not configs or not masks:
        raise ParameterError("configs and masks must each name at least one entry")
    combos = list(itertools.product(configs.items(), masks.items(), d_qk))
    frames = []
    for (label, config), (mask_name, mask), temperature in tqdm(combos, desc="sweep", disable=not progress):
        result = simulate(X0, config, mask=mask, d_qk=temperature, metrics=metrics, seed=seed)
        frames.append(_tidy(result, {"d_qk": temperature, "mask": mask_name, "config": label}, list(metrics)))
    return pd.concat(frames, ignore_index=True)
