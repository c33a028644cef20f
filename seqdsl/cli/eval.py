"""`seqdsl eval CKPT_OR_RUN_DIR`: loss per domain of a checkpoint, at any context length.

Loads the checkpoint (seqdsl/run/rundir.py), rebuilds the run's held-out sets or those
of other data (seqdsl/eval/sets.py), evaluates (seqdsl/run/loss.py) and prints a table. The
records are appended to the run's metrics.jsonl when they score the run's own held-out sets
(what `seqdsl compare` reads), or written to --out as JSON instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from seqdsl.errors import SeqError, SeqFileError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", metavar="CKPT_OR_RUN_DIR",
                        help="a run directory (its latest checkpoint), its checkpoints/ or a step_N/ directory")
    parser.add_argument("--seq-len", type=int,
                        help="context length of the evaluation windows (default: the run's seq_len, "
                             "else the model's context); longer than trained is allowed")
    parser.add_argument("--batch-size", type=int, help="windows per forward (default: the run's eval_batch, else 8)")
    parser.add_argument("--data", nargs="+", metavar="FILE",
                        help="evaluate on these data files (.jsonl, .jsonl.zst, .parquet, folders, globs) "
                             "instead of the run's data source")
    parser.add_argument("--domain-field", help="record field holding the domain (e.g. meta.redpajama_set_name); "
                                               "default: the run's, else the file's folder name")
    parser.add_argument("--domains", help="comma-separated domains (default: the run's evaluation domains)")
    parser.add_argument("--max-tokens", type=int, help="held-out tokens per domain (default: the run's eval_tokens)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N (default: cuda if available)")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                        help="autocast dtype (auto: bfloat16 on cuda, float32 on cpu)")
    parser.add_argument("--out", help="write the records as JSON here instead of appending them to "
                                      "the run's metrics.jsonl")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--recall", action=argparse.BooleanOptionalAction, default=None,
                        help="also split the loss into recall tokens (completing a bigram seen earlier in the "
                             "window, Zoology's split) and the others, in the same forwards (default: as the "
                             "run's training did, its eval_recall)")


class ProgressLines:
    """`seqdsl eval`'s progress on stderr: the domain, forwards done and the time left, at most
    every `every` seconds and when the last forward is done (a long evaluation at 8K context on
    a reference path takes minutes; silence would look like a hang)."""

    def __init__(self, every: float = 10.0, clock=time.monotonic):
        self.every, self.clock = every, clock
        self.start = self.shown = None

    def __call__(self, done: int, total: int, domain: str) -> None:
        now = self.clock()
        if self.start is None:
            self.start = now
        if done < total and self.shown is not None and now - self.shown < self.every:
            return
        self.shown = now
        timing = f", {now - self.start:.0f} s, about {(now - self.start) / done * (total - done):.0f} s left" if done else ""
        print(f"evaluating {domain}: forward {done}/{total}{timing}", file=sys.stderr, flush=True)


def _at_least(value: int | None, flag: str, least: int = 1) -> None:
    if value is not None and value < least:
        raise SeqError(f"{flag} must be at least {least}, got {value}")


def other_text(args: argparse.Namespace, config: dict) -> str:
    """Why the evaluated text is not the run's own held-out sets (its comparisons read only
    those from metrics.jsonl: `seqdsl compare` takes a later record of a step and domain in place
    of training's), or "" when it is."""
    if not config:
        return "the run has no config.json, so its held-out sets are unknown and the default data settings were read"
    if args.data:
        return "--data evaluates other files"
    own = (config.get("data") or {}).get("eval_tokens")
    if args.max_tokens is not None and args.max_tokens != own:
        return f"--max-tokens {args.max_tokens} (the run's sets hold {own} tokens a domain)"
    if args.domain_field:
        return "--domain-field relabels the text"
    return ""


def run(args: argparse.Namespace) -> int:
    from seqdsl import jsonl
    from seqdsl.run.layout import guard_output
    from seqdsl.run.rundir import build_model, read_checkpoint
    from seqdsl.eval.metrics import METRICS
    from seqdsl.run.records import evaluate_records
    from seqdsl.eval.sets import run_eval_sets
    from seqdsl.run.device import autocast_dtype, pick_device

    for value, flag in ((args.seq_len, "--seq-len"), (args.batch_size, "--batch-size")):
        _at_least(value, flag)
    _at_least(args.max_tokens, "--max-tokens", 2)  # a domain's first token is never scored
    ckpt = read_checkpoint(args.checkpoint)
    if args.out:  # before the evaluation, which can take minutes
        guard_output(args.out, "--out", [ckpt.run] if ckpt.run is not None else [])
    device = pick_device(args.device)
    lm = build_model(ckpt, device)
    domains = [d.strip() for d in args.domains.split(",") if d.strip()] if args.domains is not None else None
    if domains == []:
        raise SeqError(f"--domains {args.domains!r} names no domain", hint="e.g. --domains code,manual")
    sets = run_eval_sets(ckpt.config, data=args.data, domain_field=args.domain_field, domains=domains,
                         max_tokens=args.max_tokens)
    for s in sets.values():
        if s.tokens.numel() and int(s.tokens.max()) >= lm.spec.vocab:
            raise SeqError(f"domain {s.domain} has token id {int(s.tokens.max())}, outside model "
                           f"`{lm.spec.name}`'s vocabulary of {lm.spec.vocab}",
                           hint="evaluate with the tokenizer the run was trained with")
    seq_len = args.seq_len or ckpt.config.get("seq_len") or lm.spec.context
    batch = args.batch_size or ckpt.config.get("eval_batch") or 8
    records = evaluate_records(lm, sets, step=ckpt.step, tokens=ckpt.tokens, seq_len=seq_len, batch_size=batch,
                               device=device, autocast_dtype=autocast_dtype(args.dtype, device),
                               progress=None if args.quiet else ProgressLines(),
                               recall=ckpt.config.get("eval_recall", False) if args.recall is None else args.recall)
    print(f"checkpoint {ckpt.path} (step {ckpt.step}, {ckpt.tokens:,} tokens): model {lm.spec.name}, "
          f"seq_len {seq_len}, device {device}")
    print(table(records))
    if args.out:
        try:
            Path(args.out).write_text(json.dumps({"checkpoint": str(ckpt.path), "records": records}, indent=2)
                                      + "\n", encoding="utf-8")
        except OSError as err:
            raise SeqFileError(f"cannot write {args.out}: {err.strerror or err}") from None
        print(f"records: {args.out}")
    elif ckpt.run is not None and (other := other_text(args, ckpt.config)):
        print(f"records not appended to {ckpt.run / METRICS}: {other}, not the run's own held-out sets, "
              "which its comparisons read (pass --out FILE to keep them)")
    elif ckpt.run is not None:
        if jsonl.append(ckpt.run / METRICS, records):
            print(f"note: dropped the last line of {ckpt.run / METRICS}, a record cut short by a killed writer")
        print(f"records appended to {ckpt.run / METRICS}")
    else:
        print("records not saved: the checkpoint is not inside a run directory (pass --out FILE)")
    return 0


def table(records: list[dict]) -> str:
    recall = any("recall_loss" in r for r in records)
    rows = [("domain", "in-domain", "tokens", "loss (nats/token)", "bits/byte")
            + (("recall tokens", "recall loss", "other loss") if recall else ())]
    rows += [(r["domain"], "yes" if r["in_domain"] else "no", f"{r['eval_tokens']:,}", f"{r['loss']:.4f}",
              f"{r['bpb']:.4f}") + ((f"{r['recall_tokens']:,}", _nats(r["recall_loss"]), _nats(r["other_loss"]))
                                    if recall else ()) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def _nats(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"
