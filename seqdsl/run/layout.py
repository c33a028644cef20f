"""The files of a run directory (docs/evaluation.md, "The run directory"), and where a command
may write a file the user named. Imports neither torch nor triton: `seqdsl compare` reads runs
without them."""

from __future__ import annotations

from pathlib import Path

from seqdsl.errors import SeqError

CHECKPOINTS = "checkpoints"
WEIGHTS = "model.safetensors"
STATE = "state.json"
SPEC = "spec.seq"
CONFIG = "config.json"
METRICS = "metrics.jsonl"
RECORDS = (CONFIG, SPEC, METRICS)  # what a run directory holds beside its checkpoints


def guard_output(path: str | Path, flag: str, runs: list[Path], *, folder_made: bool = False) -> Path:
    """`path`, a file a command was asked to write (`flag`: "--out", "--plot"), checked before any
    work: not a directory, in a folder that exists (unless the writer makes it: `folder_made`), and
    none of the `runs`' own records or checkpoints (an evaluation's JSON written over
    metrics.jsonl would end that run's comparisons)."""
    out = Path(path)
    if out.is_dir():
        raise SeqError(f"{flag} {out} is a directory", hint="name a file")
    if not folder_made and not out.parent.is_dir():
        raise SeqError(f"{flag} {out}: the folder {out.parent} does not exist", hint="create it first, or name another file")
    target = out.resolve()
    for run in runs:
        root = run.resolve()
        if target in {root / name for name in RECORDS} or (root / CHECKPOINTS) in target.parents:
            raise SeqError(f"{flag} {out} is part of the run {run} (its records or checkpoints)",
                           hint="name a file outside the run's own files")
    return out
