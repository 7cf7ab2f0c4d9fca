"""The sentences of the papers that the verdicts test, quoted verbatim, each with where it is.

A verdict of kind `claim` or `analogue` names one of these (`report.check(...,
source="wu-masked-collapse")`), so that a reader can hold the verdict against the paper's own
words. A statement that cannot be quoted from the papers, their abstracts, figure captions or
the authors' published replies to their reviewers is not a claim of the papers: the book
tests it as an `extension`.

Where the quote comes from:

- Wu et al.'s abstract (arXiv:2405.18781v2) and the caption of their Fig. 2;
- Wu et al.'s replies to their NeurIPS reviewers (OpenReview), named by the question each
  answers ("Q4 on doubly exponential rates");
- Mind the Gap's abstract (ICML 2025; arXiv:2410.07799v1 for its first version);
- the captions of Mind the Gap's rebuttal figures (Figs. VII-XI, in the official repository).

Quotes keep the source's own spelling and markup (the replies write math as `$...$`). A quote
longer than a table cell can show has a `gist`: the words of it that the verdicts test, which
a chapter's table of verdicts shows and the verdict itself sets in bold.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import ParameterError

__all__ = ["Source", "QUOTES", "GIST_WIDTH", "quote", "registered"]

# Characters of a quote that a cell of a chapter's table of verdicts shows; a longer quote
# has a gist no longer than this.
GIST_WIDTH = 130


@dataclass(frozen=True)
class Source:
    """A quoted sentence: the bibliography key, where in that work, the words, and of a long
    quote its gist, the words of `text` (verbatim) that the verdicts test."""

    cite: str
    where: str
    text: str
    gist: str = ""

    def __post_init__(self):
        if self.gist and self.gist not in self.text:
            raise ValueError(f"gist must be words of the quote; {self.gist!r} is not")

    @property
    def excerpt(self) -> str:
        """What a table of verdicts shows: the whole quote, or its gist with an ellipsis on
        each side that leaves words out.

        Examples
        --------
        >>> QUOTES["mtg-fig11"].excerpt
        'Our proposed fix (dotted lines) mitigates rank collapse in width …'
        """
        if not self.gist:
            return self.text
        head = "" if self.text.startswith(self.gist) else "… "
        tail = "" if self.text.endswith(self.gist) else " …"
        return f"{head}{self.gist}{tail}"

    @property
    def reference(self) -> str:
        """'wu2024role, abstract': the key of book/references.bib, then the location."""
        return f"{self.cite}, {self.where}"


_WU, _WU_REPLY = "wu2024role", "wu2024rebuttal"
_MTG, _MTG_V1, _MTG_FIGS = "naitsaada2025gap", "naitsaada2024gapv1", "naitsaada2025rebuttal"

QUOTES: dict[str, Source] = {
    # Wu et al., the paper
    "wu-masked-collapse": Source(
        _WU,
        "abstract",
        "In particular, we find that although pure masked attention still suffers from "
        "exponential collapse to a rank one subspace, sparse or local masked attention can "
        "provably slow down the collapse rate.",
        gist="pure masked attention still suffers from exponential collapse to a rank one "
        "subspace",
    ),
    "wu-layernorm-collapse": Source(
        _WU,
        "abstract",
        "In the case of self-attention with LayerNorm, we first show that for certain classes "
        "of value matrices, collapse to a rank one subspace still happens exponentially.",
        gist="for certain classes of value matrices, collapse to a rank one subspace still "
        "happens exponentially.",
    ),
    "wu-counterexample": Source(
        _WU,
        "abstract",
        "through construction of nontrivial counterexamples, we then establish that with "
        "proper choice of value matrices, a general class of sequences may not converge to a "
        "rank one subspace",
        gist="with proper choice of value matrices, a general class of sequences may not "
        "converge to a rank one subspace",
    ),
    "wu-equilibria": Source(
        _WU,
        "abstract",
        "the self-attention dynamics with LayerNorm can simultaneously possess a rich set of "
        "equilibria with any possible rank between one and full",
        gist="can simultaneously possess a rich set of equilibria with any possible rank "
        "between one and full",
    ),
    "wu-fig2-pure": Source(
        _WU,
        "caption of Fig. 2",
        "Rank collapse happens exponentially for pure attention, despite different attention "
        "masks having different convergence rates.",
    ),
    # Wu et al., the replies to the reviewers
    "wu-mask-design": Source(
        _WU_REPLY,
        "reply to Q1 on design choices",
        "The graph-dependent rate of rank collapse established in the paper can be used as a "
        "principle for attention mask design.",
    ),
    "wu-local-slower": Source(
        _WU_REPLY,
        "reply to Q2 on local attention's experiments",
        "Compared with both full and causal attention, the convergence is clearly slower, "
        "which confirms our theoretical results.",
    ),
    "wu-local-effective": Source(
        _WU_REPLY,
        "reply to Q3 on local or causal attention",
        "For pure self-attention networks, local attention would be more effective for "
        "mitigating rank collapse.",
    ),
    "wu-diameter": Source(
        _WU_REPLY,
        "reply to Q3 on local or causal attention",
        "Our theory suggests that the rate of rank collapse is directly affected by the "
        "diameter of the directed graph (Theorem 1), which is confirmed with numerical "
        "experiments (Figure 1).",
        gist="the rate of rank collapse is directly affected by the diameter of the directed "
        "graph (Theorem 1)",
    ),
    "wu-skip": Source(
        _WU_REPLY,
        "reply to W1 on skip connections",
        "For both initialized and pretrained models, adding pure skip connections indeed "
        "prevents $\\mu$ from converging to 0, confirming existing theory. However, it seems "
        "to make $\\mu$ unstable, particularly in deeper layers (Fig. 2).",
        gist="adding pure skip connections indeed prevents $\\mu$ from converging to 0",
    ),
    "wu-layernorm-init": Source(
        _WU_REPLY,
        "reply to W1 on skip connections",
        "In initialized models, LayerNorm alone effectively prevents rank collapse without "
        "causing $\\mu$ to diverge.",
    ),
    "wu-layernorm-pretrained": Source(
        _WU_REPLY,
        "reply to W1 on skip connections",
        "In pretrained models, both LayerNorm and skip connections mitigate rank collapse "
        "while LayerNorm is key to maintaining tokens at a scale consistent with full "
        "transformers",
        gist="In pretrained models, both LayerNorm and skip connections mitigate rank collapse",
    ),
    "wu-full-stable": Source(
        _WU_REPLY,
        "reply to W1 on skip connections",
        "Compared with full transformers where $\\mu$ stays relatively stable, there is a "
        "clear discrepancy.",
    ),
    "wu-temperature-fades": Source(
        _WU_REPLY,
        "reply to W2 on the pretrained figures",
        "One hypothesis for the effect to disappear after 5 or 6 layers at initialization is "
        "that in deeper layers as rank collapse happens, tokens align with each other and the "
        "temperature naturally has much less effect",
        gist="One hypothesis for the effect to disappear after 5 or 6 layers at initialization",
    ),
    "wu-temperature-pretrained": Source(
        _WU_REPLY,
        "reply to W2 on the pretrained figures",
        "As for pretrained models, the effect of temperature now can be observed in all "
        "layers and it is significant for all masks.",
    ),
    "wu-deep-same-trend": Source(
        _WU_REPLY,
        "reply to W2 on the pretrained figures",
        "Due to the space limit, the results for 128 layer initialized models were provided "
        "in Appendix G.1. They exhibit the same trend as 12 layer models.",
        gist="They exhibit the same trend as 12 layer models.",
    ),
    "wu-olive-segment": Source(
        _WU_REPLY,
        "reply to W4 on zero activations",
        "In Section 4.3.1, when token 2 is initialized on the olive segment in Fig. 1 of the "
        "paper, rank collapse still happens.",
    ),
    "wu-center-attracts": Source(
        _WU_REPLY,
        "reply to W4 on zero activations",
        "Without LayerNorm, rank collapse happens as the center node attracts all tokens to "
        "align.",
    ),
    "wu-discontinuity": Source(
        _WU_REPLY,
        "follow-up reply to Q1 on initialisation",
        "due to the existence of LayerNorm, token trajectories are not a continuous function "
        "of model parameters, i.e. the value matrices. To get an idea, notice that if $x_1, "
        "x_2$ go to zero, the normalized values $x_1/||x_1||_2$ and $x_2/||x_2||_2$ can have a "
        "distance as large as two.",
        gist="token trajectories are not a continuous function of model parameters, i.e. the "
        "value matrices.",
    ),
    "wu-zero-depends": Source(
        _WU_REPLY,
        "reply to Q1 on X converging to 0",
        "Without LayerNorm, whether or not $X$ goes to zero as $\\mu$ goes to zero depends on "
        "many factors, including the mask, the initial inputs, and the model parameters.",
        gist="whether or not $X$ goes to zero as $\\mu$ goes to zero depends on many factors",
    ),
    "wu-layernorm-cosine": Source(
        _WU_REPLY,
        "reply to Q1 on X converging to 0",
        "In the case with LayerNorm, X would not converge to 0 and hence the convergence of "
        "$\\mu(X)$ to zero implies convergence to the same point on the unit sphere. In this "
        "case, it is equivalent to the cosine similarity going to one.",
        gist="In this case, it is equivalent to the cosine similarity going to one.",
    ),
    "wu-not-orthogonal": Source(
        _WU_REPLY,
        "follow-up reply to Q1 on initialisation",
        "It is important to note that while finite random uniform matrices are orthogonal in "
        "expectation, each realization is not orthogonal. Hence the phenomenon in experiments "
        "does not contradict our theoretical results.",
        gist="while finite random uniform matrices are orthogonal in expectation, each "
        "realization is not orthogonal.",
    ),
    "wu-random-values": Source(
        _WU_REPLY,
        "reply to Q2 on non-orthogonal value weights",
        "We believe that Theorem 2 and Corollary 1 could be extended to more general classes "
        "of matrices, such as families of random matrices, as the reviewer mentioned.",
        gist="Theorem 2 and Corollary 1 could be extended to more general classes of "
        "matrices, such as families of random matrices",
    ),
    "wu-rmsnorm": Source(
        _WU_REPLY,
        "reply to Q3 on RMSNorm",
        "We were aware of RMSNorm but instead chose the name “LayerNorm” following the "
        "convention of previous works such as Geshkovski et al. 2023 and Tian et al. 2023 to "
        "avoid confusion of terminology.",
        gist="We were aware of RMSNorm but instead chose the name “LayerNorm”",
    ),
    "wu-dong-specific": Source(
        _WU_REPLY,
        "reply to Q4 on doubly exponential rates",
        "we believe that the results in Dong et al. 2020 are specific to their setting and "
        "would not trivially extend to other settings, including ours.",
        gist="the results in Dong et al. 2020 are specific to their setting and would not "
        "trivially extend to other settings",
    ),
    "wu-mu-standard": Source(
        _WU_REPLY,
        "follow-up reply to Q4 on the collapse measure",
        "Our definition of $\\mu$ is standard: it is mathematically equivalent to the "
        "definition of the measure $**res**$ used in Dong et al. (the original rank collapse "
        "paper), and the definition adopted in more recent e.g. Geshkovski et al. to study "
        "convergence of tokens in transformers.",
        gist="it is mathematically equivalent to the definition of the measure $**res**$ used "
        "in Dong et al.",
    ),
    "wu-rotated-counterexample": Source(
        _WU_REPLY,
        "follow-up reply to Q2 on zero activations",
        "If one replaces $W$ in the example with $W_{Z} = Z^{T}WZ$ where $Z$ is an orthogonal "
        "matrix, then the trajectory of $X^{(t)}$ of the new dynamics would be $X_Z^{(t)} = "
        "X^{(t)}Z$. Notice that under the new dynamics, the first token is going to converge "
        "to $(0,1)Z$, which clearly may not have any zero activation.",
        gist="the trajectory of $X^{(t)}$ of the new dynamics would be $X_Z^{(t)} = X^{(t)}Z$.",
    ),
    # Mind the Gap, the paper
    "mtg-fix": Source(
        _MTG,
        "abstract",
        "we propose a novel yet simple practical solution to mitigate rank collapse in width "
        "by removing the outlier eigenvalue(s).",
    ),
    "mtg-implicit": Source(
        _MTG,
        "abstract",
        "Our theoretical framework offers a fresh perspective on recent practical studies, "
        "such as (Ye et al., 2024; Ali et al., 2023), whose ad hoc solutions can now be "
        "interpreted as implicit efforts to address the spectral gap issue.",
        gist="whose ad hoc solutions can now be interpreted as implicit efforts to address "
        "the spectral gap issue.",
    ),
    "mtg-v1-markov": Source(
        _MTG_V1,
        "abstract",
        "Modelling softmax-based attention at initialisation with Random Markov matrices, our "
        "theoretical analysis reveals that a spectral gap between the two largest singular "
        "values of the attention matrix causes (iii)",
        gist="a spectral gap between the two largest singular values of the attention matrix",
    ),
    "mtg-v1-key-query": Source(
        _MTG_V1,
        "abstract",
        "Our attention model accurately describes the standard key-query attention in a "
        "single-layer transformer",
    ),
    "mtg-v1-training": Source(
        _MTG_V1,
        "abstract",
        "Moreover, we validate our findings and discuss the training benefits of the proposed "
        "fix through experiments",
    ),
    # Mind the Gap, the rebuttal figures
    "mtg-fig7": Source(
        _MTG_FIGS,
        "caption of Fig. VII",
        "all solid lines—except for the case labelled as ’Identity A’ where attention is set "
        "to the identity (resulting in no attention)—rapidly collapse to 1 due to rank "
        "collapse in depth, regardless of additional modules like LayerNorm or skip "
        "connections.",
        gist="rapidly collapse to 1 due to rank collapse in depth, regardless of additional "
        "modules like LayerNorm or skip connections.",
    ),
    "mtg-fig7-fix": Source(
        _MTG_FIGS,
        "caption of Fig. VII",
        "The only significant change occurs when the spectral gap is removed (denoted as "
        "’A⊥’), confirming that mitigating rank collapse in width helps prevent its "
        "propagation in depth.",
        gist="The only significant change occurs when the spectral gap is removed (denoted as "
        "’A⊥’)",
    ),
    "mtg-fig8": Source(
        _MTG_FIGS,
        "caption of Fig. VIII",
        "Gradients already explode in magnitude at the second layer (L = 2).",
    ),
    "mtg-fig8-fix": Source(
        _MTG_FIGS,
        "caption of Fig. VIII",
        "In the case of attention matrices as described in equation (1), i.e. input-dependent "
        "key-query attention, our proposed fix slows down the gradients’ growth",
        gist="i.e. input-dependent key-query attention, our proposed fix slows down the "
        "gradients’ growth",
    ),
    "mtg-fig10": Source(
        _MTG_FIGS,
        "caption of Fig. X",
        "The stable rank drops sharply from T after just one application of the softmax layer "
        "(ℓ = 1), resulting in a stable rank that has already collapsed.",
        gist="The stable rank drops sharply from T after just one application of the softmax "
        "layer (ℓ = 1)",
    ),
    "mtg-fig11": Source(
        _MTG_FIGS,
        "caption of Fig. XI",
        "Our proposed fix (dotted lines) mitigates rank collapse in width compared to the "
        "original attention-only transformer (solid lines).",
        gist="Our proposed fix (dotted lines) mitigates rank collapse in width",
    ),
    "wu-layernorm-stability": Source(
        _WU_REPLY,
        "reply to W1 on skip connections",
        "Incorporating LayerNorm seems to alleviate this stability issue",
    ),
    "mtg-fig7-setting": Source(
        _MTG_FIGS,
        "caption of Fig. VII",
        "Here, d = T = 150, the inputs are synthetic and orthogonal, and experiments are "
        "averaged over 5 runs.",
    ),
}


def registered(text: str) -> Source | None:
    """The registered quote whose words are `text` (a verdict record keeps the words), or None
    for words no longer registered, such as those of a record from an older version."""
    return next((source for source in QUOTES.values() if source.text == text), None)


def quote(name: str) -> Source:
    """The quoted sentence registered as `name`, or a one-line error listing the names."""
    try:
        return QUOTES[name]
    except (KeyError, TypeError):
        raise ParameterError(f"source must be one of {', '.join(QUOTES)}; got {name!r}") from None
