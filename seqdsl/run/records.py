"""Evaluation results as metrics.jsonl records (the run-directory contract; seqdsl/jsonl.py appends them).

`eval_records` is the one place an evaluation becomes `{"kind": "eval", ...}` records, and
`evaluate_records` (evaluate, then `eval_records`) the one call training and `seqdsl eval` both
make: the two write the same schema. This module imports torch only when it evaluates.
"""

from __future__ import annotations

from collections.abc import Mapping



def eval_records(results: Mapping, in_domain: Mapping[str, bool], *, step: int, tokens: int,
                 seq_len: int) -> list[dict]:
    """One record per domain of `results` (domain -> DomainLoss)."""
    return [{"kind": "eval", "step": step, "tokens": tokens, "domain": domain,
             "in_domain": bool(in_domain[domain]), "loss": r.loss, "bpb": r.bpb,
             "eval_tokens": r.tokens, "seq_len": seq_len}
            for domain, r in results.items()]


def evaluate_records(model, sets: Mapping, *, step: int, tokens: int, seq_len: int, batch_size: int,
                     device, autocast_dtype=None, split: tuple[int, int] = (0, 1),
                     progress=None, recall: bool = False) -> list[dict]:
    """The eval records of `model` on `sets` (domain -> EvalSet) after `step` optimizer steps and
    `tokens` training tokens, the batches split over processes as `split` = (rank, world) says,
    `progress(done, total, domain)` told of every forward (seqdsl/run/loss.py: `evaluate`).
    `recall`: each record also splits its loss into recall tokens and the others
    (seqdsl/run/recall.py), from the same forwards."""
    from seqdsl.run.recall import RecallSplits
    from seqdsl.run.loss import evaluate

    splits = RecallSplits() if recall else None
    results = evaluate(model, sets, seq_len=seq_len, batch_size=batch_size, device=device,
                       autocast_dtype=autocast_dtype, split=split, progress=progress, observe=splits)
    records = eval_records(results, {d: s.in_domain for d, s in sets.items()}, step=step, tokens=tokens,
                           seq_len=seq_len)
    if splits is not None:
        if split[1] > 1:
            splits.sum_over_processes(device)
        for record in records:
            record.update(splits.fields(record["domain"]))
    return records
