"""collapse: the science library behind the rank-collapse companion.

Re-derives the numerical claims of Wu et al. (NeurIPS 2024, attention masks and
LayerNorm) and Nait Saada, Naderi & Tanner (ICML 2025, "Mind the Gap").

Wu et al.: masks, attention, stacks at initialisation
    masks           attention masks as graphs: radius, diameter, centers, connectivity;
                    deployed sparse patterns (Longformer, BigBird, Swin, ...), per-layer lists
    mask_design     deployed sparse-attention patterns as a catalogue, their graphs at many N,
                    radius growth, component spreads and rank agreement
    memory          the Recurrent Memory Transformer as a toy: segments beside memory tokens,
                    and its unrolled graph
    attention       masked softmax with temperature, LayerNorm flavours, outlier removal
    san             self-attention stacks at init and their per-layer simulation
    inputs          BERT's embedding output at random init, the stacks' inputs
    theory          the Theorem 1 / Theorem 2 / Corollary 1 bounds
    counterexample  the LayerNorm counterexample and Theorem 3's equilibria
    pretrained      BERT- and GPT-2-family checkpoints from local weights
    corpus          offline English text cut into seeded windows of the model's tokens
Mind the Gap: random attention and its spectrum
    markov          random Markov attention
    lanczos         the top singular values of large matrices (thick-restart Lanczos)
    free_probability  the large-T laws: the quarter circle, the first layer's limits
    gap             the Mind-the-Gap stacks: rank collapse in width and depth, the fix
    gap_shared      their fast float32 engine for Markov and identity stacks
    gap_width       their sweeps over (gamma, T) cells
    gap_readings    what the chapters read off those runs: spectra, slopes, intervals
    gap_masks       the outlier(s) of random masked attention, counted and removed
    attention_maps  centred, differential and sigmoid attention, the maps read as implicit fixes
    implicit_fixes  those maps' spectra against T, and where differential attention's outlier
                    leaves the bulk
    gradients       exact gradient norms of those stacks, by structure or autograd
    training        a small attention-only model trained with and without the fix
Measuring and running
    metrics         mu, stable ranks, cosines, numerical rank, sigma_min
    fit             collapse rates (slopes of log mu) and log-log power laws
    sweep           grids of stack configurations -> one tidy DataFrame
    analysis        reading a sweep's frame: curves, log-statistics, rates, summaries
    chunks          the same sweeps, resumable, chunk by chunk, on an executor
    cost            FLOP counts and ETAs
    workloads       each chapter's FLOPs and peak memory, from its parameters
    runtime         the device a parameter names, and CPU threads
    rng             seeds to generators: the one path of every random draw
    provenance      what a result depends on: the digest behind every cache
    atomic          files written whole or not at all
    report          the verdict record a chapter writes
    plotting        the book's figure style, figures drawn at the page's width
    figure_data     every figure's plotted points as a tidy table, shown beside it as CSV
    tables          DataFrames as Markdown tables for the page, numbers to their precision
The book's tooling (`collapse` command) lives apart, in collapse.book.

Submodules load on first use (`collapse.gap` imports torch, pandas and scipy; the command's
`collapse list` needs none of them).
"""

import importlib
import pkgutil

from .checks import ParameterError

__version__ = "0.1.0"

# Every module of the package but the command's tooling (collapse.book).
_SUBMODULES = tuple(
    module.name
    for module in pkgutil.iter_modules(__path__)
    if not module.name.startswith("_") and module.name != "book"
)


def __getattr__(name: str):
    """`collapse.gap` and the like, imported when first asked for."""
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'collapse' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_SUBMODULES])


__all__ = [*_SUBMODULES, "ParameterError", "__version__"]
