"""collapse: the science library behind the rank-collapse companion.

Re-derives the numerical claims of Wu et al. (NeurIPS 2024, attention masks and
LayerNorm) and Nait Saada, Naderi & Tanner (ICML 2025, "Mind the Gap").

Wu et al.: masks, attention, stacks at initialisation
    masks           attention masks as graphs: radius, diameter, centers, connectivity;
                    deployed sparse patterns (Longformer, BigBird, Swin, ...), per-layer lists
    mask_design     deployed sparse-attention patterns as a catalogue, their graphs at many N,
                    radius growth, component spreads and rank agreement
    attention       masked softmax with temperature, LayerNorm flavours, outlier removal
    san             self-attention stacks at init and their per-layer simulation
    inputs          BERT's embedding output at random init, the stacks' inputs
    theory          the Theorem 1 / Theorem 2 / Corollary 1 bounds
    counterexample  the LayerNorm counterexample and Theorem 3's equilibria
    pretrained      BERT- and GPT-2-family checkpoints from local weights
    corpus          offline English text cut into seeded windows of the model's tokens
Mind the Gap: random attention and its spectrum
    markov          random Markov attention and the quarter-circle law
    gap             the Mind-the-Gap stacks: rank collapse in width and depth, the fix
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
    runtime         the device a parameter names, and CPU threads
    rng             seeds to generators: the one path of every random draw
    provenance      what a result depends on: the digest behind every cache
    report          the verdict record a chapter writes
    plotting        the book's figure style, figures drawn at the page's width
    figure_data     every figure's plotted points as a tidy table, shown beside it as CSV
    tables          DataFrames as Markdown tables for the page, numbers to their precision
The book's tooling (`collapse` command) lives apart, in collapse.book.
"""

from . import (
    analysis,
    attention,
    attention_maps,
    corpus,
    cost,
    counterexample,
    fit,
    gap,
    gradients,
    implicit_fixes,
    inputs,
    markov,
    mask_design,
    masks,
    metrics,
    pretrained,
    provenance,
    report,
    rng,
    runtime,
    san,
    sweep,
    theory,
    training,
)
from .checks import ParameterError

__version__ = "0.1.0"

__all__ = [
    "analysis",
    "attention",
    "attention_maps",
    "corpus",
    "cost",
    "counterexample",
    "runtime",
    "fit",
    "gap",
    "gradients",
    "implicit_fixes",
    "inputs",
    "markov",
    "mask_design",
    "masks",
    "metrics",
    "pretrained",
    "provenance",
    "report",
    "rng",
    "san",
    "sweep",
    "theory",
    "training",
    "ParameterError",
    "__version__",
]
