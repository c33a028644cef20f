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
    ctx = (lambda: torch.autocast(device.type, dtype=autocast_dtype)) if autocast_dtype else nullcontext
    for name, s in sets.items():
        tokens = s.tokens.to(device)
        n = tokens.numel()
        starts = list(range(0, n - 1, seq_len))
        full = [st for st in starts if st + seq_len + 1 <= n]
        windows = [tokens[st: st + seq_len + 1][None] for st in starts[len(full):]]  # the shorter last one
        windows += [torch.stack([tokens[st: st + seq_len + 1] for st in full[i: i + batch_size]])
                    for i in range(0, len(full), batch_size)]
        total = 0.0
        for w in windows:
            with ctx():
                logits, _ = model(w[:, :-1])
            total += F.cross_entropy(logits.float().flatten(0, 1), w[:, 1:].flatten(), reduction="sum").item()
        loss = total / (n - 1)
        out[name] = _DomainLoss(loss, loss * n / (math.log(2) * s.n_bytes), n - 1)
    return out
