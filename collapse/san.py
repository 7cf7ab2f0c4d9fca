"""Self-attention networks (SANs) at initialisation, and their simulation layer by layer.

A layer maps X (..., n, d) to X' through multi-head masked softmax attention and one
of the variants Wu et al. compare:

    attention  X' = SA(X)                    (pure attention, Theorem 1)
    skip       X' = X + SA(X)
    ln         X' = LN(SA(X))                (post-LN, Theorem 2 with scale-only LN)
    skip_ln    X' = LN(X + SA(X))            (post-LN transformer without MLP)
    full       H = LN(X + SA(X)); X' = LN(H + MLP(H))   (BERT layer)
               with pre_ln: H = X + SA(LN(X)); X' = H + MLP(LN(H))   (GPT-2 layer)

SA(X) = concat_h(A_h(X) X W_V^h) W_O: with one head, no W_O and no bias (the toys of
the theory) it is A(X) X W_V. Weights act on the right (X @ W). Every layer gets
fresh weights, drawn from a stream of its own (seed, layer, role), so the same seed
gives the same attention weights whatever the variant, bias or batch layout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace

import torch

from . import metrics as _metrics
from . import rng
from .attention import LAYERNORMS, masked_softmax, remove_outlier, temperature_scale
from .book.progress import bar as progress_bar
from .checks import ParameterError, check_choice, check_float, check_int
from .masks import as_sequence, check_mask
from .theory import epsilon

__all__ = [
    "VARIANTS",
    "INITS",
    "SANConfig",
    "bert_variants",
    "LayerWeights",
    "init_layer",
    "init_layers",
    "self_attention",
    "apply_layer",
    "simulate",
    "Simulation",
]

VARIANTS = ("attention", "skip", "ln", "skip_ln", "full")
INITS = (
    "torch_default",
    "bert_normal",
    "orthogonal_v",
    "spectral_v",
    "gaussian_v",
    "orthogonal_vo",
)
# BERT's exact GELU and GPT-2's tanh approximation ("gelu_new").
ACTIVATIONS = {
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
}


@dataclass(frozen=True)
class SANConfig:
    """Architecture of a stack of self-attention layers; validated on construction."""

    d: int
    n_layers: int
    n_heads: int = 1
    variant: str = "attention"
    layernorm: str = "scale"
    ln_eps: float = 1e-12
    init: str = "torch_default"
    out_proj: bool = False
    bias: bool = False
    d_ff: int | None = None
    qk_gain: float = 1.0
    remove_outlier: bool = False
    pre_ln: bool = False
    activation: str = "gelu"

    def __post_init__(self):
        check_int("d", self.d, minimum=1)
        check_int("n_layers", self.n_layers, minimum=0)
        check_int("n_heads", self.n_heads, minimum=1)
        if self.d % self.n_heads:
            raise ParameterError(f"n_heads must divide d={self.d}, got {self.n_heads}")
        check_choice("variant", self.variant, VARIANTS)
        check_choice("layernorm", self.layernorm, LAYERNORMS)
        check_choice("init", self.init, INITS)
        check_float("ln_eps", self.ln_eps, minimum=0.0)
        check_float("qk_gain", self.qk_gain, minimum=0.0)
        if self.d_ff is not None:
            check_int("d_ff", self.d_ff, minimum=1)
        check_choice("activation", self.activation, ACTIVATIONS)

    @classmethod
    def bert(cls, variant: str = "attention", n_layers: int = 12, **overrides) -> SANConfig:
        """BERT-base sizes: d=768, 12 heads of 64, Q/K/V/O with biases, centred LN (eps 1e-12)."""
        base = dict(
            d=768,
            n_heads=12,
            out_proj=True,
            bias=True,
            layernorm="centered",
            ln_eps=1e-12,
            d_ff=3072,
        )
        return cls(n_layers=n_layers, variant=variant, **{**base, **overrides})

    @property
    def head_dim(self) -> int:
        return self.d // self.n_heads

    @property
    def ffn_width(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d


def bert_variants(
    n_layers: int, d: int, n_heads: int, variants=VARIANTS, **overrides
) -> dict[str, SANConfig]:
    """BERT-shaped stacks of several variants at one size, which share every weight (same
    sizes and init), so that a sweep runs them in lockstep and their curves differ only by
    the architecture.

    Parameters
    ----------
    n_layers, d, n_heads : int
        Depth, width and heads of every stack; the FFN is 4 d wide unless `overrides`
        give d_ff.
    variants : sequence of str
        Among VARIANTS.
    **overrides
        Further SANConfig fields (init, bias, layernorm, d_ff).

    Returns
    -------
    dict
        {variant: SANConfig}.

    Examples
    --------
    >>> stacks = bert_variants(12, 256, 4, ["skip", "ln"])
    >>> [(v, c.n_layers, c.d_ff) for v, c in stacks.items()]
    [('skip', 12, 1024), ('ln', 12, 1024)]
    """
    sizes = {"n_layers": n_layers, "d": d, "n_heads": n_heads, "d_ff": 4 * d, **overrides}
    return {v: SANConfig.bert(variant=v, **sizes) for v in variants}


@dataclass
class LayerWeights:
    """One layer's parameters; None means absent (no bias, no W_O) or identity (LN gain/shift)."""

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    b_Q: torch.Tensor | None = None
    b_K: torch.Tensor | None = None
    b_V: torch.Tensor | None = None
    W_O: torch.Tensor | None = None
    b_O: torch.Tensor | None = None
    ln1_weight: torch.Tensor | None = None
    ln1_bias: torch.Tensor | None = None
    W_1: torch.Tensor | None = None
    b_1: torch.Tensor | None = None
    W_2: torch.Tensor | None = None
    b_2: torch.Tensor | None = None
    ln2_weight: torch.Tensor | None = None
    ln2_bias: torch.Tensor | None = None

    def map(self, fn) -> LayerWeights:
        """Apply `fn` to every present tensor (casting, moving, reshaping)."""
        return replace(
            self,
            **{f.name: fn(v) for f in fields(self) if (v := getattr(self, f.name)) is not None},
        )

    def to(self, *args, **kwargs) -> LayerWeights:
        return self.map(lambda t: t.to(*args, **kwargs))


# The roles each init draws orthogonal: "orthogonal_vo" makes the whole value path W_V W_O
# orthogonal (the same W_V as "orthogonal_v"; everything else as "torch_default").
_ORTHOGONAL = {"orthogonal_v": ("W_V",), "orthogonal_vo": ("W_V", "W_O")}
# Each (role) has its own random stream; the index is part of the stream's seed.
_ROLES = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O", "b_O", "W_1", "b_1", "W_2", "b_2")


def _draw(config: SANConfig, seed: int, layer: int, role: str, fan_in: int, shape) -> torch.Tensor:
    """One parameter tensor in float64 on the CPU, by the config's init scheme."""
    g = rng.generator(seed, layer, _ROLES.index(role))
    is_bias = role.startswith("b_")
    if config.init == "bert_normal":
        t = (
            torch.zeros(shape, dtype=torch.float64)
            if is_bias
            else torch.randn(shape, generator=g, dtype=torch.float64) * 0.02
        )
    elif role == "W_V" and config.init == "gaussian_v":  # N(0, 1/d): E ||x W_V||^2 = ||x||^2
        t = torch.randn(shape, generator=g, dtype=torch.float64) / math.sqrt(fan_in)
    elif role in _ORTHOGONAL.get(config.init, ()):  # Haar: the Q of a Gaussian's QR
        q, r = torch.linalg.qr(torch.randn(shape, generator=g, dtype=torch.float64))
        t = q * torch.sign(torch.diagonal(r))
    else:  # torch default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases
        # in place: the same bits as (u * 2 - 1) / sqrt(fan_in), without three temporaries
        t = torch.rand(shape, generator=g, dtype=torch.float64).mul_(2).sub_(1)
        t = t.div_(math.sqrt(fan_in))
        if role == "W_V" and config.init == "spectral_v":
            t = t / torch.linalg.matrix_norm(t, ord=2)
    if role in ("W_Q", "W_K") and config.qk_gain != 1.0:
        t = t * config.qk_gain
    return t


def init_layer(
    config: SANConfig,
    layer: int,
    seed: int | Sequence[int] = 0,
    *,
    dtype=torch.float64,
    device=None,
) -> LayerWeights:
    """Fresh weights of layer `layer`; a sequence of seeds stacks them along a leading dim."""
    layer = check_int("layer", layer, minimum=0)
    seeds = rng.check_seeds(seed)
    d, f = config.d, config.ffn_width
    spec = {"W_Q": (d, (d, d)), "W_K": (d, (d, d)), "W_V": (d, (d, d))}
    if config.bias:
        spec.update(b_Q=(d, (d,)), b_K=(d, (d,)), b_V=(d, (d,)))
    if config.out_proj:
        spec["W_O"] = (d, (d, d))
        if config.bias:
            spec["b_O"] = (d, (d,))
    if config.variant == "full":
        spec.update(W_1=(d, (d, f)), b_1=(d, (f,)), W_2=(f, (f, d)), b_2=(f, (d,)))

    def draw(role, fan_in, shape):
        tensors = [_draw(config, s, layer, role, fan_in, shape) for s in seeds]
        return torch.stack(tensors) if isinstance(seed, Sequence) else tensors[0]

    drawn = {role: draw(role, fan_in, shape) for role, (fan_in, shape) in spec.items()}
    for group in (("W_Q", "W_K", "W_V"), ("b_Q", "b_K", "b_V")):
        if group[0] in drawn:  # one buffer, so that self_attention projects with one GEMM
            fused = torch.cat([drawn.pop(role) for role in group], dim=-1)
            parts = fused.to(dtype=dtype, device=device).split(d, dim=-1)
            drawn.update(zip(group, parts, strict=True))
    return LayerWeights(**{role: t.to(dtype=dtype, device=device) for role, t in drawn.items()})


def init_layers(
    config: SANConfig, seed: int | Sequence[int] = 0, *, dtype=torch.float64, device=None
) -> Iterator[LayerWeights]:
    """Weights of every layer, drawn lazily so that deep stacks never hold all of them."""
    for layer in range(config.n_layers):
        yield init_layer(config, layer, seed, dtype=dtype, device=device)


def _affine(X, W, b, workspace: dict | None = None):
    """X @ W + b, as one fused BLAS call when the weights are shared across the batch.

    workspace: a dict kept across layers, whose buffer takes the product when W is shared
    (a fresh block of more than 32 MB is mapped anew by the allocator every time, and its
    page faults cost as much as the softmax)."""
    if W.ndim != 2:
        return X @ W if b is None else X @ W + b
    if workspace is None and b is None:
        return X @ W
    X2 = X.reshape(-1, X.shape[-1])
    out = None
    if workspace is not None:
        out = workspace.get("product")
        if out is None or out.shape != (len(X2), W.shape[-1]) or out.dtype != X.dtype:
            out = workspace["product"] = X.new_empty(len(X2), W.shape[-1])
    product = torch.mm(X2, W, out=out) if b is None else torch.addmm(b, X2, W, out=out)
    return product.view(*X.shape[:-1], W.shape[-1])


def _joined(*parts: torch.Tensor) -> torch.Tensor:
    """The parts concatenated along the last dim: a view when they are adjacent column blocks
    of one buffer (as init_layer draws Q, K and V), else a copy."""
    first, width = parts[0], parts[0].shape[-1]
    adjacent = first.stride(-1) == 1 and all(
        p.shape == first.shape
        and p.stride() == first.stride()
        and p.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
        and p.data_ptr() == first.data_ptr() + i * width * first.element_size()
        for i, p in enumerate(parts)
    )
    if adjacent and (first.ndim == 1 or first.stride(-2) == len(parts) * width):
        return first.as_strided((*first.shape[:-1], len(parts) * width), first.stride())
    return torch.cat(parts, dim=-1)


def _fused_attention(q, k, v, mask, scale):
    """softmax(q k^T / scale under mask) v by torch's fused kernel, never forming the n x n
    matrices; heads come back already merged: (..., n, heads * head_dim)."""
    if isinstance(scale, torch.Tensor):
        q, scale = q / scale, 1.0
    batch, (heads, n, width) = q.shape[:-3], q.shape[-3:]
    if len(batch) != 1:  # the fused CPU kernel wants (batch, heads, n, width)
        q, k, v = (t.reshape(-1, heads, n, width) for t in (q, k, v))
    if mask is not None and mask.ndim > 2:  # and a mask of 2 or 4 dims (3 takes a slow path)
        mask = check_mask(mask).unsqueeze(-3).expand(*batch, 1, n, n).reshape(-1, 1, n, n)
    elif mask is not None:
        check_mask(mask)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=1.0 / scale
    )
    return out.transpose(-3, -2).reshape(*batch, n, heads * width)


def self_attention(
    X, w: LayerWeights, config: SANConfig, mask=None, scale=None, *, weights=True, workspace=None
):
    """Multi-head masked attention; returns (output (..., n, d), attention (..., heads, n, n)).

    scale: sqrt(d_qk), None for the head width; a float, or a tensor broadcastable to
    (..., heads, n, n) (see attention.temperature_scale). weights=False returns None for
    the attention and runs torch's fused scaled_dot_product_attention (several times
    faster; rounding differs from the explicit softmax in the last bits). workspace: a
    dict the caller keeps from layer to layer, in which the fused Q/K/V projection reuses
    one buffer (nothing returned refers to it).
    """
    d, n_heads, head_dim = config.d, config.n_heads, config.head_dim
    W = _joined(w.W_Q, w.W_K, w.W_V)
    b = None if w.b_Q is None else _joined(w.b_Q, w.b_K, w.b_V)
    q, k, v = (
        t.unflatten(-1, (n_heads, head_dim)).transpose(-3, -2)
        for t in _affine(X, W, b, workspace).split(d, dim=-1)
    )
    scale = math.sqrt(head_dim) if scale is None else scale
    if weights or config.remove_outlier:
        # scaling q is cheaper than scaling the n x n scores
        heads_mask = None if mask is None else mask.unsqueeze(-3)
        A = masked_softmax((q / scale) @ k.transpose(-1, -2), heads_mask)
        if config.remove_outlier:
            A = remove_outlier(A)
        out = (A @ v).transpose(-3, -2).flatten(-2)
    else:
        A, out = None, _fused_attention(q, k, v, mask, scale)
    if w.W_O is not None:
        out = _affine(out, w.W_O, w.b_O)
    return out, A if weights else None


def _layernorm(X, config: SANConfig, weight, bias):
    if config.layernorm == "scale":
        return LAYERNORMS["scale"](X)
    if config.layernorm == "rms":  # gain: the layer's ln weight (None: 1)
        return LAYERNORMS["rms"](X, config.ln_eps, weight)
    return LAYERNORMS["centered"](X, config.ln_eps, weight, bias)


def apply_layer(
    X, w: LayerWeights, config: SANConfig, mask=None, scale=None, *, weights=True, workspace=None
):
    """One layer of the configured variant; returns (X', attention matrices). scale, weights
    (False: no attention matrices, the fused kernel) and workspace as in self_attention."""
    if config.variant == "full" and config.pre_ln:
        return _pre_ln_layer(X, w, config, mask, scale, weights, workspace)
    y, A = self_attention(X, w, config, mask, scale, weights=weights, workspace=workspace)
    variant = config.variant
    if variant == "attention":
        return y, A
    if variant == "ln":
        return _layernorm(y, config, w.ln1_weight, w.ln1_bias), A
    y = y.add_(X)  # y is this layer's own tensor: X + SA(X) in place
    if variant == "skip":
        return y, A
    h = _layernorm(y, config, w.ln1_weight, w.ln1_bias)
    if variant == "skip_ln":
        return h, A
    return _layernorm(_ffn(h, w, config).add_(h), config, w.ln2_weight, w.ln2_bias), A


def _ffn(h, w: LayerWeights, config: SANConfig):
    return _affine(ACTIVATIONS[config.activation](_affine(h, w.W_1, w.b_1)), w.W_2, w.b_2)


def _pre_ln_layer(X, w: LayerWeights, config: SANConfig, mask, scale, weights, workspace):
    """GPT-2's layer: H = X + SA(LN1(X)); X' = H + MLP(LN2(H)) (the residual stream is never
    normalised)."""
    normed = _layernorm(X, config, w.ln1_weight, w.ln1_bias)
    y, A = self_attention(normed, w, config, mask, scale, weights=weights, workspace=workspace)
    h = y.add_(X)
    return _ffn(_layernorm(h, config, w.ln2_weight, w.ln2_bias), w, config).add_(h), A


@dataclass
class Simulation:
    """Per-layer metrics, each a float64 CPU tensor (L+1, *batch), and the last layer's X."""

    metrics: dict[str, torch.Tensor]
    final: torch.Tensor

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.metrics[name]


def _align_to_batch(w: LayerWeights, ndim: int) -> LayerWeights:
    """Give per-seed weights (S, ...) singleton dims so they broadcast over X's other batch
    dims."""

    def reshape(t):
        core = 2 if t.ndim == 3 else 1
        return t.reshape(t.shape[:1] + (1,) * (ndim - 1 - core) + t.shape[1:])

    return w.map(reshape)


def _check_inputs(X0, config: SANConfig, mask, d_qk, seed):
    if not isinstance(X0, torch.Tensor) or X0.ndim < 2 or X0.shape[-1] != config.d:
        raise ParameterError(
            f"X0 must be a tensor of shape (..., n, d={config.d}), got "
            f"{tuple(getattr(X0, 'shape', ()))}"
        )
    if not X0.is_floating_point():
        raise ParameterError(f"X0 must be a floating-point tensor, got {X0.dtype}")
    layer_masks = (None,)
    if mask is not None:
        layer_masks = as_sequence(mask)
        if layer_masks[0].shape[-1] != X0.shape[-2]:
            raise ParameterError(
                f"mask must be ({X0.shape[-2]}, {X0.shape[-2]}) to match X0's tokens, got "
                f"{tuple(layer_masks[0].shape)}"
            )
        layer_masks = tuple(m.to(X0.device) for m in layer_masks)
    scale = None if d_qk is None else temperature_scale(d_qk, X0, 3)
    if isinstance(seed, Sequence) and X0.ndim < 3:
        raise ParameterError(
            "X0 needs a leading seed dim when seed is a sequence (shape (seeds, ..., n, d))"
        )
    return layer_masks, scale


@torch.inference_mode()
def simulate(
    X0: torch.Tensor,
    config: SANConfig,
    *,
    mask: torch.Tensor | Sequence[torch.Tensor] | None = None,
    d_qk=None,
    seed: int | Sequence[int] = 0,
    weights: Iterable[LayerWeights] | None = None,
    metrics: Sequence[str] = ("mu",),
    record_epsilon: bool = False,
    progress: bool = False,
) -> Simulation:
    """Run X0 (..., n, d) through the stack, keeping only per-layer metrics.

    The dynamics run in X0's dtype and device; metrics are computed in float64.
    `mask` (n, n) or (..., n, n) and `d_qk` (float, or a tensor over batch dims)
    broadcast against X0's batch dims; d_qk defaults to the head width. A list of masks
    is cycled over layers: layer l uses mask[l % len(mask)] (masks.compose gives the
    graph of one period). A sequence `seed` draws one network per seed, matched to X0's
    leading dim. `weights` replaces the random draw (e.g. pretrained layers).
    `record_epsilon` adds "epsilon": the smallest attention weight on any edge of each
    layer's mask (NaN at t = 0).
    """
    names = _metrics.check_metric_names(metrics)
    layer_masks, scale = _check_inputs(X0, config, mask, d_qk, seed)
    if weights is None:
        weights = init_layers(config, seed, dtype=X0.dtype, device=X0.device)
    per_seed = isinstance(seed, Sequence)
    history = {name: [value.cpu()] for name, value in _metrics.evaluate(X0, names).items()}
    eps_history = [torch.full(X0.shape[:-2], math.nan, dtype=torch.float64)]
    X, workspace = X0, {}
    for layer, w in enumerate(
        progress_bar(weights, shown=progress, total=config.n_layers, desc="layers", leave=False)
    ):
        mask = layer_masks[layer % len(layer_masks)]
        w = w.to(dtype=X0.dtype, device=X0.device)
        X, A = apply_layer(
            X,
            _align_to_batch(w, X0.ndim) if per_seed else w,
            config,
            mask,
            scale,
            weights=record_epsilon,
            workspace=workspace,
        )
        for name, value in _metrics.evaluate(X, names).items():
            history[name].append(value.cpu())
        if record_epsilon:
            eps_history.append(
                epsilon(A, None if mask is None else mask.unsqueeze(-3)).amin(-1).double().cpu()
            )
    result = {name: torch.stack(values) for name, values in history.items()}
    if record_epsilon:
        result["epsilon"] = torch.stack(eps_history)
    return Simulation(result, X)
