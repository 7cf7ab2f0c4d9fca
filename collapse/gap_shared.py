"""The fast engine of the Mind-the-Gap model: Markov and identity stacks in float32 from one
draw per seed shared by every configuration.

Why: the README sweep of the official code and the Fig. VII grid take seconds, not
minutes. `simulate_shared` (`gap_width.width_sweep(..., fast=True)`) draws each seed's X_0,
W_l and logits once (`shared_draws`), runs float32 arithmetic rescaled every layer, and
factors the stacks without skip through one shared X W chain. Other draws than
`gap.simulate_many`, the same model: run in float64 on the same draws it equals
`gap.gap_layer`, layer by layer, to rounding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from . import metrics as _metrics
from . import rng
from .checks import ParameterError, check_int
from .gap import GapConfig, _check_configs

__all__ = ["SHARED_METRICS", "shared_draws", "simulate_shared"]

SHARED_METRICS = ("stable_rank", "gram_stable_rank")
_X0_AND_W_STREAM, _LOGITS_STREAM = 2, 3


def _fill_shared_draws(X0, W, logits, T: int, d: int, seed: int) -> None:
    """Fill one seed's X_0 (T, d), W (L, d, d) and, unless None, logits (L, T, T) in place."""
    g = rng.generator(seed, _X0_AND_W_STREAM)
    n, m = max(T, d), min(T, d)
    q, r = torch.linalg.qr(torch.randn(n, m, generator=g, dtype=X0.dtype).double())
    q = q * torch.sign(torch.diagonal(r))
    X0.copy_(q.mT if d >= T else q)
    for w in W:
        w.normal_(generator=g)
    if logits is not None:
        h = rng.generator(seed, _LOGITS_STREAM)
        for layer in logits:
            layer.normal_(generator=h)
        logits.mul_(math.sqrt(math.log(2))).sub_(math.log(2) / 2)


def shared_draws(
    T: int, d: int, n_layers: int, seed: int, *, markov: bool = True
) -> dict[str, torch.Tensor]:
    """Seed `seed`'s random matrices for `simulate_shared`, float32: X_0 (T, d), W (L, d, d)
    and, with `markov`, the logits (L, T, T) of the Markov matrices A_l = softmax(logits_l).

    Why one set for every configuration: Markov and identity stacks of one seed then see
    the same X_0 and W_l (a paired design), and the very draws can be handed to other code,
    such as the official float32 model. X_0 (orthonormal rows, or columns if T > d, from
    the QR of a Gaussian) and then each W_l come from stream (seed, 2), the logits from
    (seed, 3), layer after layer, so a shallower stack draws a prefix of a deeper one.
    """
    T, d = check_int("T", T, minimum=1), check_int("d", d, minimum=1)
    n_layers = check_int("n_layers", n_layers, minimum=0)
    (seed,) = rng.check_seeds([seed])
    out = {"X0": torch.empty(T, d), "W": torch.empty(n_layers, d, d)}
    if markov:
        out["logits"] = torch.empty(n_layers, T, T)
    _fill_shared_draws(out["X0"], out["W"], out.get("logits"), T, d, seed)
    return out


def _layer_attention(config: GapConfig, A, perp, identity=None):
    """A_l, A_l - 11^T/T or `identity` for `config`."""
    if config.attention == "identity":
        return identity
    return perp if config.fix else A


def _shared_grams(configs, X0, W, logits) -> torch.Tensor:
    """X_l X_l^T of every configuration at layers 1..L: (C, L, S, T, T) in the draws' dtype.

    Why factors: a stack without skip is X_l = M_l R_l, where the chain R_l = X_0 W_1 ... W_l
    (with the centring C = I - 11^T/d after each W_l under LN) is common to all such stacks
    and only the T x T factor is per configuration: M_l = A_l M_{l-1} (A_l⊥ M_{l-1}, or the
    identity), rows then scaled by 1/std under LN, the std read off the diagonal of the
    Gram N K N^T (K = R_l R_l^T). The centred chain is the plain one plus a rank-l term,
    R_l + P_l B_l^T, updated as R_l C + P_{l-1} (C W_l^T B_{l-1})^T, which costs d^2 l, not
    T d^2, a layer. So each layer costs one X W product for the chain and one per skip
    stack, and layer 1 a single X_0 W_1. Skip stacks run as they are. The chain, the skip
    stacks and the factors without LN are divided by their RMS every layer (B_l by the
    chain's), which no stable rank sees and which keeps float32 finite over any depth; the
    LN factors absorb the chain's division.
    """
    S, L = W.shape[:2]
    T, d = X0.shape[-2:]
    plain = [i for i, c in enumerate(configs) if not c.skip]
    skips = [i for i, c in enumerate(configs) if c.skip]
    centred = any(configs[i].layernorm for i in plain)
    n = bool(plain) + len(skips)
    # plain identity stacks without LN are the chain itself; the others keep a factor M_l
    bare = [i for i in plain if configs[i].attention == "identity" and not configs[i].layernorm]
    kept = [i for i in plain if i not in bare]
    layernorm = torch.tensor([configs[i].layernorm for i in kept], device=X0.device)[:, None]
    eye = torch.eye(T, dtype=X0.dtype, device=X0.device).expand(S, T, T)
    M = None
    u = X0.new_full((S, d, 1), d**-0.5)
    P, B = X0.new_empty(S, T, 0), X0.new_empty(S, d, 0)
    grams = X0.new_empty(len(configs), L, S, T, T)
    states = prev = None
    for layer in range(L):
        A = perp = None
        if logits is not None:
            A = torch.softmax(logits[:, layer], dim=-1)
            perp = A - 1 / T
        if states is None:  # layer 1: every stack starts from the same X_0
            Y = (X0 @ W[:, layer]).unsqueeze(1).expand(S, n, T, d)
            prev = X0.unsqueeze(1).expand(S, n, T, d)
        else:
            Y = (states.view(S, n * T, d) @ W[:, layer]).view(S, n, T, d)
        new, K = [], {}
        if plain:
            R = Y[:, 0].clone()
            G = R @ R.mT
            scale = _rms(G, d)
            if centred:
                WB = W[:, layer].mT @ B
                B = torch.cat([(WB - WB.mean(1, keepdim=True)) / scale, u], dim=-1)
                P = torch.cat([P, -(R @ u) / scale], dim=-1)
            new.append(R.div_(scale))
            K[False] = G.div_(scale**2)
            if centred:  # (R + P B^T)(R + P B^T)^T without forming it: T d l, not T^2 d
                EP = (R @ B) @ P.mT
                K[True] = K[False] + EP + EP.mT + P @ (B.mT @ B) @ P.mT
        for k, i in enumerate(skips, start=bool(plain)):
            att = _layer_attention(configs[i], A, perp)
            Z = (Y[:, k] if att is None else att @ Y[:, k]) + prev[:, k]
            if configs[i].layernorm:
                Z = torch.nn.functional.layer_norm(Z, (d,), eps=1e-5)
            G = torch.matmul(Z, Z.mT, out=grams[i, layer])
            new.append(Z if configs[i].layernorm else Z.div_(_rms(G, d)))
        if kept:  # the factors of the plain stacks, batched over configurations
            att = torch.stack([_layer_attention(configs[i], A, perp, eye) for i in kept], 1)
            N = att if M is None else att @ M
            # LN: undo the chain's division, so that N R_l is LN's input; else scale-free
            rms = N.square().mean((-2, -1), keepdim=True).sqrt()
            N = torch.where(layernorm[..., None], scale[..., None] * N, N / rms)
            G = N @ torch.stack([K[configs[i].layernorm] for i in kept], 1) @ N.mT
            std = torch.where(layernorm, (G.diagonal(dim1=-2, dim2=-1) / d + 1e-5).rsqrt(), 1.0)
            M = std[..., None] * N
            grams[kept, layer] = (std[..., None] * G * std[..., None, :]).transpose(0, 1)
        for i in bare:
            grams[i, layer] = K[False]
        states = prev = torch.stack(new, dim=1)
    return grams


def _rms(G: torch.Tensor, d: int) -> torch.Tensor:
    """RMS entry (S, 1, 1) of the T x d matrices whose Gram matrices are G (S, T, T)."""
    return (G.diagonal(dim1=-2, dim2=-1).mean(-1) / d).sqrt()[:, None, None]


def _stable_ranks(grams: torch.Tensor, dominant: bool, steps: int = 8):
    """(sr(X), sr(XX^T)) in float64 from Gram matrices X X^T (..., T, T); NaN for a zero or
    non-finite one. `dominant`: try power steps first.

    Why not eigvalsh alone: it was a third of the sweep, and only lam_max is needed, since
    sum lam = trace and sum lam^2 = ||G||_F^2. Stacks that collapse have one dominant
    eigenvalue, which a few power steps from the all-ones vector pin down: their Rayleigh
    quotient theta is kept where certified, i.e. residual r <= 1000 eps theta (eps of the
    dtype) and (theta - r)^2 > ||G||_F^2 / 2 (two eigenvalues >= theta - r cannot both fit,
    so the one within r of theta is lam_max, and lam_max is in [theta, theta + r]);
    eigvalsh does the rest, on a view of `grams` where it can (no copy).
    """
    trace = grams.diagonal(dim1=-2, dim2=-1).sum(-1).double()
    frob2 = grams.square().sum((-2, -1)).double()  # cascade sum: vector_norm loses 1e-5
    top = torch.full_like(trace, math.nan)
    if dominant:
        v = grams.new_full((*grams.shape[:-1], 1), grams.shape[-1] ** -0.5)
        for _ in range(steps):
            w = grams @ v
            v = w / torch.linalg.vector_norm(w, dim=-2, keepdim=True)
        w = grams @ v
        theta = (v * w).sum((-2, -1))
        r = torch.linalg.vector_norm(w - theta[..., None, None] * v, dim=(-2, -1))
        tol = 1000 * torch.finfo(grams.dtype).eps
        ok = (r <= tol * theta) & ((theta - r).double() ** 2 > frob2 / 2)
        top = torch.where(ok, theta.double(), top)
    rest = torch.isfinite(trace + frob2) & torch.isnan(top)
    if rest.all():
        top = torch.linalg.eigvalsh(grams)[..., -1].double().clamp_min(0)
    elif rest.any():
        top[rest] = torch.linalg.eigvalsh(grams[rest])[..., -1].double().clamp_min(0)
    return trace / top, frob2 / top**2


@torch.inference_mode()
def simulate_shared(
    configs: Sequence[GapConfig],
    seeds: int | Sequence[int] = 0,
    *,
    metrics=("gram_stable_rank",),
    dtype=torch.float32,
    device=None,
    seed_batch: int | None = None,
) -> dict[str, torch.Tensor]:
    """Per-layer stable ranks (n_configs, L+1, n_seeds) of Markov and identity stacks from
    `shared_draws`: the fast engine behind `width_sweep(..., fast=True)`.

    Why: the README sweep of the official code in a few seconds on one core. Every
    configuration of a seed runs on the same X_0, W_l and A_l (a paired design), draws cost
    float32 normals, stacks without skip share their X W products (`_shared_grams`), and
    lam_max comes from certified power steps or eigvalsh (`_stable_ranks`). Its numbers are
    not `simulate_many`'s (other draws), but the same model: dtype=torch.float64 reruns the
    very draws in float64, against which float32 is within ~1e-5 on the README grid
    (benchmarks/mtg_stable_rank.py checks it). A zero stack gives NaN.
    """
    configs = _check_configs(configs)
    for c in configs:
        if c.attention not in ("markov", "identity") or c.map != "softmax":
            raise ParameterError(
                "simulate_shared runs Markov and identity attention with the softmax map only, "
                f"got {c.label!r}"
            )
    names = _metrics.check_metric_names(metrics, SHARED_METRICS)
    seeds = rng.check_seeds(seeds)
    if dtype not in (torch.float32, torch.float64):
        raise ParameterError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    chunk = len(seeds) if seed_batch is None else check_int("seed_batch", seed_batch, minimum=1)
    T, d, L = configs[0].T, configs[0].d, configs[0].n_layers
    markov = any(c.attention == "markov" for c in configs)
    # Markov stacks without the fix collapse (one dominant eigenvalue): run first, grams[:k]
    dominant = [c.attention == "markov" and not c.fix for c in configs]
    order, k = sorted(range(len(configs)), key=lambda i: not dominant[i]), sum(dominant)
    out = {n: torch.empty(len(configs), L + 1, len(seeds), dtype=torch.float64) for n in names}
    for start in range(0, len(seeds), chunk):
        part = seeds[start : start + chunk]
        X0, W = torch.empty(len(part), T, d), torch.empty(len(part), L, d, d)
        logits = torch.empty(len(part), L, T, T) if markov else None
        for s, seed in enumerate(part):
            _fill_shared_draws(X0[s], W[s], None if logits is None else logits[s], T, d, seed)
        X0, W = X0.to(dtype=dtype, device=device), W.to(dtype=dtype, device=device)
        if logits is not None:
            logits = logits.to(dtype=dtype, device=device)
        grams = _shared_grams([configs[i] for i in order], X0, W, logits)  # (C, L, S, T, T)
        first = _stable_ranks(X0 @ X0.mT, False)  # one X_0 for all
        later = [_stable_ranks(grams[:k], True), _stable_ranks(grams[k:], False)]
        for name, at_0, *after in zip(SHARED_METRICS, first, *later, strict=True):
            if name in names:
                value = torch.cat([at_0.expand(len(configs), 1, -1), torch.cat(after)], 1)
                out[name][order, :, start : start + len(part)] = value.cpu()
    return out
