"""The stable public API, imported and used from a plain `python -c`, as outside code would."""

import subprocess
import sys

SCRIPT = (
    """
import math, torch
import collapse
from collapse import masks, metrics, markov

m = masks.make("causal_sliding_window", 128)
assert m.dtype == torch.bool and m.shape == (128, 128) and m.diagonal().all()
assert m[5, 4] and m[5, 5] and not m[5, 6] and not m[5, 3]
assert masks.make("sliding_window", 9, window=2)[4].tolist() == """
    """[False, False, True, True, True, True, True, False, False]
assert masks.radius(m) == 127 and masks.diameter(m) == math.inf
assert masks.radius(masks.make("sliding_window", 128)) == 64 and """
    """masks.diameter(masks.make("complete", 4)) == 1

X = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]]])
assert torch.allclose(metrics.mu(X), torch.tensor([2.0, 0.0], dtype=torch.float64))
assert torch.allclose(metrics.stable_rank(torch.eye(3).expand(2, 3, 3)), """
    """torch.tensor([3.0, 3.0], dtype=torch.float64))

A = markov.random_markov(64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
assert A.shape == (64, 64) and torch.allclose(A.sum(-1), torch.ones(64, dtype=torch.float64))
print("public API ok", collapse.__version__)
"""
)


def test_public_api_from_plain_python():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "public API ok" in result.stdout
