"""Real English text, offline, cut into seeded windows of exactly n tokens of a model's tokenizer.

The default corpus is CPython's own `pydoc_data.topics`: the text of the Python
language reference's help topics (79 topics, about 65,000 words, 465,000 characters),
shipped with every CPython installation under the PSF licence, so it exists on any
machine without a network. It is expository English prose written for readers, like
the Wikipedia excerpts Wu et al. sampled, though technical and narrower in topic;
`load_text(path)` takes any text files instead, and `load_text("wikipedia")` streams
Wikipedia through the optional `datasets` package when there is a network.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from . import rng
from .checks import ParameterError, check_int

__all__ = ["Corpus", "load_text", "token_windows"]


@dataclass(frozen=True)
class Corpus:
    """A text and what a reader needs to know about it: where it came from, its licence, size and
    hash."""

    text: str
    name: str
    licence: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def words(self) -> int:
        return len(self.text.split())


def _pydoc_topics() -> Corpus:
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[key] for key in sorted(topics))
    return Corpus(
        text, "CPython pydoc_data.topics (Python language reference help topics)", "PSF-2.0"
    )


def _files(path: Path) -> Corpus:
    files = sorted(path.rglob("*.txt")) if path.is_dir() else [path]
    if not files:
        raise ParameterError(f"corpus directory {str(path)!r} holds no .txt files")
    try:
        text = "\n\n".join(f.read_text(encoding="utf-8") for f in files)
    except UnicodeDecodeError as err:
        raise ParameterError(f"corpus file is not UTF-8 text: {err.reason}") from None
    return Corpus(text, f"{len(files)} text file(s) under {path}", "as given by the user")


def _wikipedia(n_articles: int = 2000) -> Corpus:
    try:
        import datasets
    except ImportError:
        raise ParameterError(
            "corpus 'wikipedia' needs the optional package datasets: pip install "
            "'rank-collapse[wikipedia]'"
        ) from None
    try:
        stream = datasets.load_dataset(
            "wikimedia/wikipedia", "20231101.en", split="train", streaming=True
        )
        text = "\n\n".join(
            article["text"] for article, _ in zip(stream, range(n_articles), strict=False)
        )
    except Exception as err:  # no network, hub refused: a clear line instead of a traceback
        raise ParameterError(
            f"corpus 'wikipedia' could not be streamed ({type(err).__name__}); use the default "
            "corpus or a path"
        ) from None
    return Corpus(
        text, f"English Wikipedia (20231101.en), first {n_articles} articles", "CC BY-SA 4.0"
    )


def load_text(source: str | Path | None = None) -> Corpus:
    """The default corpus (None), "wikipedia" (network + datasets), or a text file or folder of
    .txt files."""
    if source is None or source == "default":
        return _pydoc_topics()
    if source == "wikipedia":
        return _wikipedia()
    path = Path(source)
    if not path.exists():
        raise ParameterError(
            "corpus must be 'default', 'wikipedia' or an existing text file or folder; "
            f"{str(path)!r} does not exist"
        )
    return _files(path)


def token_windows(
    model, corpus: Corpus, n_samples: int, n_tokens: int = 128, *, seed: int = 0
) -> torch.Tensor:
    """(n_samples, n_tokens) token ids: distinct windows of the corpus at seeded random offsets.

    BERT-family windows are [CLS] + (n_tokens - 2) text tokens + [SEP], as the model saw
    its inputs in training; GPT-2-family windows are n_tokens text tokens. A corpus too
    short for n_samples distinct windows is an error, never a silent repeat.
    """
    n_samples = check_int("n_samples", n_samples, minimum=1)
    n_tokens = check_int("n_tokens", n_tokens, minimum=3)
    if n_tokens > model.max_positions:
        raise ParameterError(
            f"n_tokens must be at most {model.max_positions} for {model.name}, got {n_tokens}"
        )
    ids = torch.tensor(
        model.tokenizer.encode(corpus.text, add_special_tokens=False).ids, dtype=torch.long
    )
    special = (
        [model.tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]")]
        if model.family == "bert"
        else []
    )
    body = n_tokens - len(special)
    n_windows = ids.numel() - body + 1
    if n_samples > n_windows:
        raise ParameterError(
            f"corpus too small: {corpus.name} has {ids.numel()} tokens, {max(n_windows, 0)} "
            f"distinct windows of {body}; asked for {n_samples}"
        )
    starts = torch.randperm(n_windows, generator=rng.generator(seed))[:n_samples]
    windows = ids[starts[:, None] + torch.arange(body)]
    if special:
        cls, sep = (torch.full((n_samples, 1), s, dtype=torch.long) for s in special)
        windows = torch.cat([cls, windows, sep], dim=1)
    return windows
