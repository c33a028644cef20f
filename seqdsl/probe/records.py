"""Probe results as JSON lines (`probe.jsonl` in the output folder), one per (spec, task,
difficulty), appended as each is measured; what identifies a result for `--resume`; the table.

A record:

    {"kind": "probe", "spec": "specs/transformer.seq", "label": "transformer", "model": ...,
     "digest": <the built model's resolved spec>, "task": "mqar", "vocab": 128,
     "level": {"seq_len": 64, "pairs": 4, "queries": 4}, "trained_at": [<levels>],
     "accuracy": 0.98, "exact": 0.93, "chance": 0.016, "answers": 1024, "examples": 256,
     "settings": {...}, "preset": "tiny", "keep_absolute": false, "final_loss": 0.05,
     "train_seconds": 41.2, "verdict": "pass", "verdict_probed": "pass", "device": "cpu", "date": ...}

`accuracy` is null, with `skipped` saying why, for a level the model cannot run (a mixer with
per-position parameters, beyond its context).
"""

from __future__ import annotations

import json
from pathlib import Path

from seqdsl import jsonl

RECORDS = "probe.jsonl"

# What must be equal for a stored result to stand for one asked again: the model built (its
# digest covers the spec, preset and resize), the task and its vocabulary, the difficulty, how it
# was trained and what it was trained at.
KEY_FIELDS = ("digest", "task", "vocab", "text", "level", "trained_at", "settings")


def result_key(record: dict) -> str:
    return json.dumps({k: record.get(k) for k in KEY_FIELDS}, sort_keys=True)


def read_records(path: str | Path) -> list[dict]:
    """The probe records of a probe.jsonl (none when it does not exist). A last line cut short
    (a sweep killed mid-write) is ignored; a broken line elsewhere is a SeqFileError."""
    try:
        records, _ = jsonl.read(path)
    except FileNotFoundError:
        return []
    return [record for _, record in records if record.get("kind") == "probe"]


def _percent(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def table(records: list[dict]) -> str:
    """A Markdown table: a row per result, accuracy and exact-match in percent, chance beside."""
    rows = [("spec", "task", "difficulty", "accuracy %", "exact %", "chance %", "verdict (probed)")]
    for r in records:
        level = " ".join(f"{k}={v}" for k, v in r["level"].items())
        rows.append((r["label"], r["task"], level, _percent(r["accuracy"]), _percent(r["exact"]),
                     _percent(r["chance"]), r["verdict_probed"]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
