"""collapse: the library behind the rank-collapse companion.

Re-derives the numerical claims of Wu et al. (NeurIPS 2024, attention masks and
LayerNorm) and Nait Saada, Naderi & Tanner (ICML 2025, "Mind the Gap"):

    masks           attention masks as graphs: radius, diameter, centers, connectivity
    attention       masked softmax with temperature, LayerNorm flavours, outlier removal
    san             self-attention stacks at init and their per-layer simulation
    metrics         mu, stable ranks, cosines, numerical rank, sigma_min
    markov          random Markov attention and the quarter-circle law
    gap             the Mind-the-Gap stacks: rank collapse in width and depth, the fix
    gradients       exact gradient norms of those stacks, by structure or autograd
    training        a small attention-only model and batched training, with and without the fix
    pretrained      BERT- and GPT-2-family checkpoints from local weights (default: packaged MiniLM-L6)
    corpus          offline English text cut into seeded windows of the model's tokens
    counterexample  the LayerNorm counterexample and Theorem 3's equilibria
    theory          the Theorem 1 / Theorem 2 / Corollary 1 bounds
    fit             fitted collapse rates (slopes of log mu)
    sweep           grids of configurations -> tidy DataFrames
    report          verdicts, expectations and the scoreboard
    plotting        the book's figure style
"""

from . import attention, corpus, counterexample, fit, gap, gradients, markov, masks, metrics, pretrained, report, san, sweep, theory, training
from .checks import ParameterError

__version__ = "0.1.0"

__all__ = [
    "attention",
    "corpus",
    "counterexample",
    "fit",
    "gap",
    "gradients",
    "markov",
    "masks",
    "metrics",
    "pretrained",
    "report",
    "san",
    "sweep",
    "theory",
    "training",
    "ParameterError",
    "__version__",
]
