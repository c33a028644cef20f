"""The one place the trainer calls evaluation: `seqdsl.eval.evaluate` (the run-directory contract).

MERGE NOTE (remove at merge): until the `eval` branch lands, `seqdsl.eval` does not exist on this
branch and `_fallback_evaluate` below stands in with the contract's definition (windows of S + 1
tokens advancing by S, every token but the first scored once; bpb = loss * N / (ln 2 * n_bytes)).
When `seqdsl.eval` is importable it is always used; delete `_fallback_evaluate` then.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from seqdsl.data.evalset import EvalSet


def evaluate_sets(model, sets: Mapping[str, EvalSet], *, seq_len: int, batch_size: int, device,
                  autocast_dtype=None) -> dict[str, tuple[float, float, int]]:
    """{domain: (loss nats/token, bits/byte, tokens scored)}; the model is left in train mode."""
    try:
        from seqdsl.eval import evaluate
    except ImportError:
        evaluate = _fallback_evaluate
    model.eval()
    try:
        out = evaluate(model, sets, seq_len=seq_len, batch_size=batch_size, device=device,
                       autocast_dtype=autocast_dtype)
    finally:
        model.train()
    return {d: (r.loss, r.bpb, r.tokens) for d, r in out.items()}


class _DomainLoss:  # MERGE NOTE: remove with _fallback_evaluate
    def __init__(self, loss: float, bpb: float, tokens: int):
        self.loss, self.bpb, self.tokens = loss, bpb, tokens


@torch.no_grad()
def _fallback_evaluate(model, sets, *, seq_len, batch_size, device, autocast_dtype=None):
    """MERGE NOTE: stand-in for seqdsl.eval.evaluate until the eval branch merges; delete then."""
    out = {}
    for name, s in sets.items():
        tokens = s.tokens.to(device)
        n = tokens.numel()
        starts = list(range(0, n - 1, seq_len))
        total = 0.0
        for i in range(0, len(starts), batch_size):
            for start in starts[i: i + batch_size]:  # one window at a time: the last may be shorter
                window = tokens[start: start + seq_len + 1]
                ctx = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else nullcontext()
                with ctx:
                    logits, _ = model(window[None, :-1])
                total += F.cross_entropy(logits.float()[0], window[1:], reduction="sum").item()
        loss = total / (n - 1)
        out[name] = _DomainLoss(loss, loss * n / (math.log(2) * s.n_bytes), n - 1)
    return out
