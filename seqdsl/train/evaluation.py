"""The one place the trainer calls evaluation: `seqdsl.eval.evaluate` (the run-directory contract)."""

from __future__ import annotations

from collections.abc import Mapping

from seqdsl.data.evalset import EvalSet
from seqdsl.eval import evaluate


def evaluate_sets(model, sets: Mapping[str, EvalSet], *, seq_len: int, batch_size: int, device,
                  autocast_dtype=None) -> dict[str, tuple[float, float, int]]:
    """{domain: (loss nats/token, bits/byte, tokens scored)}; the model is left in train mode."""
    model.eval()
    try:
        out = evaluate(model, sets, seq_len=seq_len, batch_size=batch_size, device=device,
                       autocast_dtype=autocast_dtype)
    finally:
        model.train()
    return {d: (r.loss, r.bpb, r.tokens) for d, r in out.items()}
