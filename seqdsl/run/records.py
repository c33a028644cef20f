"""Evaluation results as metrics.jsonl records (the run-directory contract), and appending them.

`eval_records` is the one place an evaluation becomes `{"kind": "eval", ...}` records, and
`evaluate_records` (evaluate, then `eval_records`) the one call training and `seqdsl eval` both
make: the two write the same schema. This module imports torch only when it evaluates.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from seqdsl.errors import SeqFileError


def eval_records(results: Mapping, in_domain: Mapping[str, bool], *, step: int, tokens: int,
                 seq_len: int) -> list[dict]:
    """One record per domain of `results` (domain -> DomainLoss)."""
    return [{"kind": "eval", "step": step, "tokens": tokens, "domain": domain,
             "in_domain": bool(in_domain[domain]), "loss": r.loss, "bpb": r.bpb,
             "eval_tokens": r.tokens, "seq_len": seq_len}
            for domain, r in results.items()]


def evaluate_records(model, sets: Mapping, *, step: int, tokens: int, seq_len: int, batch_size: int,
                     device, autocast_dtype=None, split: tuple[int, int] = (0, 1),
                     progress=None, observe=None) -> list[dict]:
    """The eval records of `model` on `sets` (domain -> EvalSet) after `step` optimizer steps and
    `tokens` training tokens, the batches split over processes as `split` = (rank, world) says,
    `progress(done, total, domain)` told of every forward and `observe(domain)` shown every batch
    (seqdsl/run/loss.py: `evaluate`)."""
    from seqdsl.run.loss import evaluate

    results = evaluate(model, sets, seq_len=seq_len, batch_size=batch_size, device=device,
                       autocast_dtype=autocast_dtype, split=split, progress=progress, observe=observe)
    return eval_records(results, {d: s.in_domain for d, s in sets.items()}, step=step, tokens=tokens,
                        seq_len=seq_len)


def append_records(path: str | Path, records: list[dict]) -> None:
    """Append records as JSON lines, flushed and fsynced. A last line left without its newline
    (a run killed mid-write) is closed first, so a new record never joins a broken one."""
    path = Path(path)
    try:
        needs_newline = path.is_file() and path.stat().st_size > 0 and _last_byte(path) != b"\n"
        with open(path, "a", encoding="utf-8") as f:
            if needs_newline:
                f.write("\n")
            for record in records:
                f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise SeqFileError(f"cannot append to {path}: {err.strerror or err}") from None


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1)
