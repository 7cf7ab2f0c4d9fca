"""Inputs for the Wu et al. stacks: BERT's embedding output at random initialisation."""

from __future__ import annotations

import math

import torch

from . import rng
from .attention import centered_layernorm
from .checks import check_float, check_int

__all__ = ["embedding_inputs", "gaussian_inputs"]


def embedding_inputs(
    n_samples: int,
    n_tokens: int,
    d: int,
    *,
    seed: int = 0,
    std: float = 0.02,
    eps: float = 1e-12,
    shared: bool = True,
    dtype=torch.float64,
    device=None,
) -> torch.Tensor:
    """BERT's embedding output at random init, (n_samples, n_tokens, d): LN(word + position +
    type).

    Why: Wu et al. feed the SANs BERT's embedding output. At random init the three tables
    are N(0, std^2), BERT's initializer range; the position table and the one token-type row
    are shared by every sample, and each token gets its own word row (with a 30k
    vocabulary repeats are rare). The shared rows give the tokens a common component,
    as in BERT; the LayerNorm is centred with gain 1, bias 0 and BERT's eps.
    shared=False draws the position and type rows afresh for every token, which makes
    all rows independent (LayerNorm of i.i.d. Gaussian rows):
    the comparison shows how much the shared component matters.
    """
    n_samples = check_int("n_samples", n_samples, minimum=1)
    n_tokens = check_int("n_tokens", n_tokens, minimum=1)
    d = check_int("d", d, minimum=1)
    std = check_float("std", std, positive=True)
    g = rng.generator(seed)
    rows = (n_samples, n_tokens) if not shared else ()
    position = torch.randn(*(rows or (n_tokens,)), d, generator=g, dtype=torch.float64)
    token_type = torch.randn(*rows, d, generator=g, dtype=torch.float64)
    words = torch.randn(n_samples, n_tokens, d, generator=g, dtype=torch.float64)
    X = centered_layernorm(std * (words + position + token_type), eps)
    return X.to(dtype=dtype, device=device)


def gaussian_inputs(
    n_samples: int, n_tokens: int, d: int, *, seed: int = 0, device=None
) -> torch.Tensor:
    """Tokens with i.i.d. N(0, 1/d) entries, (n_samples, n_tokens, d) in float64: the inputs
    of the toy of Theorem 1, each row of norm about 1.

    All samples come from one generator seeded with `seed` (see `collapse.rng`).

    Examples
    --------
    >>> X = gaussian_inputs(2, 3, 4, seed=0)
    >>> X.shape, X.dtype
    (torch.Size([2, 3, 4]), torch.float64)
    """
    g = rng.generator(seed)
    X = torch.randn(n_samples, n_tokens, d, generator=g, dtype=torch.float64)
    return (X / math.sqrt(d)).to(device)
