"""A BERT-sized attention-only SAN against transformers' BertSelfAttention and the machine's peak.

Simulates 12 layers of 12-head, d=768 self-attention (Q/K/V/O with biases, mu tracked
per layer in float64, as san.simulate keeps it) on a batch of 32 sequences of 128
tokens under a causal mask, in float32 and float64, and times in the same process,
round by round (each round runs every candidate once; the best round counts, so a
busy machine slows all of them alike):

- SAN, pre-drawn: san.simulate with the layers' weights drawn beforehand;
- SAN, fresh: san.simulate drawing each layer's weights (what a sweep over seeds does);
  the draw alone is timed too, and printed apart;
- transformers: the same stack built from transformers' BertSelfAttention modules
  ("eager" and "sdpa" attention) plus each layer's output projection, holding the same
  weights, with the same per-layer mu (its modules are built before timing, so the fair
  comparison is with the SAN's pre-drawn run);
- peak: one square GEMM with the same FLOP count as the whole stack: the machine's
  practical peak for this dtype.

Rates are useful FLOP/s (projections, scores and A V; softmax, biases, mu and the draw
are not counted). Both stacks must agree on mu to 1e-5 (float32) / 1e-10 (float64) of
its first-layer value, or it stops (relative to mu itself would not do: once tokens
collapse, mu is rounding noise).

    python benchmarks/san_throughput.py [--rounds 6] [--batch 32] [--tokens 128] [--layers 12]
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from collapse import masks, metrics, san


def useful_flops(batch: int, n: int, d: int, layers: int) -> float:
    """Multiply-adds x 2 of the Q/K/V/O projections, the scores and A V."""
    projections = 4 * 2 * batch * n * d * d
    attention = 2 * 2 * batch * n * n * d
    return layers * (projections + attention)


def best_times(candidates: dict, rounds: int) -> dict[str, float]:
    """The best of `rounds` wall times of each candidate, measured round by round, each round
    starting one candidate later (what ran just before, e.g. a freed GEMM's memory handed back
    to the system, weighs on every candidate in turn)."""
    for fn in candidates.values():
        fn()  # warm-up: allocator, thread pool, kernel selection
    names = list(candidates)
    best = dict.fromkeys(names, float("inf"))
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            candidates[name]()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def transformers_stack(config: san.SANConfig, weights, dtype, kind: str):
    """transformers' BertSelfAttention + output projection per layer, holding our weights (ours
    act on the right: X @ W)."""
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertSelfAttention

    bert = BertConfig(
        hidden_size=config.d, num_attention_heads=config.n_heads, attention_probs_dropout_prob=0.0
    )
    bert._attn_implementation = kind
    layers = []
    for w in weights:
        attention, output = BertSelfAttention(bert), torch.nn.Linear(config.d, config.d)
        for linear, W, b in (
            (attention.query, w.W_Q, w.b_Q),
            (attention.key, w.W_K, w.b_K),
            (attention.value, w.W_V, w.b_V),
            (output, w.W_O, w.b_O),
        ):
            linear.weight.data, linear.bias.data = W.T.contiguous(), b.clone()
        layers.append((attention.to(dtype).eval(), output.to(dtype).eval()))
    return layers


@torch.inference_mode()
def run_transformers(X, layers, mask):
    """The reference stack: mu in float64 after every layer, as san.simulate keeps it."""
    bias = torch.zeros(mask.shape, dtype=X.dtype).masked_fill_(~mask, -torch.inf)[None, None]
    history = [metrics.mu(X)]
    for attention, output in layers:
        X = output(attention(X, attention_mask=bias)[0])
        history.append(metrics.mu(X))
    return torch.stack(history)


def measure(dtype, args) -> tuple[float, dict[str, float]]:
    """(useful FLOP of the stack, {candidate: seconds})."""
    b, n, d, L = args.batch, args.tokens, 768, args.layers
    flops = useful_flops(b, n, d, L)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(b, n, d, generator=g, dtype=dtype)
    side = round((flops / 2) ** (1 / 3))  # 2 side^3 = flops
    P, Q = (torch.randn(side, side, generator=g, dtype=dtype) for _ in range(2))
    config = san.SANConfig.bert(variant="attention", n_layers=L)
    mask = masks.make("causal", n)
    drawn = list(san.init_layers(config, 0, dtype=dtype))
    candidates = {
        "SAN, pre-drawn": lambda: san.simulate(X, config, mask=mask, weights=drawn),
        "SAN, fresh": lambda: san.simulate(X, config, mask=mask, seed=0),
        "draw alone": lambda: list(san.init_layers(config, 0, dtype=dtype)),
    }
    ours = candidates["SAN, pre-drawn"]()["mu"]
    for kind in ("eager", "sdpa"):
        try:
            layers = transformers_stack(config, drawn, dtype, kind)
        except ImportError:
            print("transformers is not installed: no peer")
            break
        worst = float((ours - run_transformers(X, layers, mask)).abs().max() / ours[0].max())
        if worst > (1e-5 if dtype == torch.float32 else 1e-10):
            raise SystemExit(
                f"{dtype}, {kind}: the transformers stack disagrees with the SAN "
                f"(mu differs by {worst:.1e} of its first value)"
            )
        candidates[f"transformers ({kind})"] = lambda layers=layers: run_transformers(
            X, layers, mask
        )
    candidates["peak: one GEMM"] = lambda: P @ Q
    seconds = best_times(candidates, args.rounds)
    seconds["peak: one GEMM"] *= flops / (2 * side**3)
    return flops, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    print(
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; batch {args.batch}, N={args.tokens}, d=768, "
        f"12 heads, {args.layers} layers, causal mask"
    )
    for dtype in (torch.float32, torch.float64):
        flops, seconds = measure(dtype, args)
        name = str(dtype).removeprefix("torch.")
        peak = seconds["peak: one GEMM"]
        print(f"{name}: {flops / 1e9:.0f} GFLOP per run")
        for candidate, s in seconds.items():
            if candidate == "draw alone":
                share = f"({s / seconds['SAN, fresh']:.0%} of the fresh run)"
            else:
                share = f"{flops / s / 1e9:6.1f} GFLOP/s, {peak / s:.2f} of peak"
            print(f"  {candidate:22s} {s:7.3f} s  {share}")
        for kind in ("eager", "sdpa"):
            if (peer := seconds.get(f"transformers ({kind})")) is not None:
                print(
                    f"  SAN vs transformers ({kind}): {peer / seconds['SAN, pre-drawn']:.2f}x "
                    f"pre-drawn, {peer / seconds['SAN, fresh']:.2f}x with fresh weights"
                )


if __name__ == "__main__":
    main()
