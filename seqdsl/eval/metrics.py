"""Reading a run's metrics.jsonl (the run-directory contract, docs/evaluation.md).

Later lines supersede earlier ones with the same key: a run resumed from a checkpoint logs again
the steps it had logged after that checkpoint before it was killed, and `seqdsl eval` may append
a fresh evaluation of a step that training evaluated. Keys: train records by step; eval records
by (step, domain, seq_len). A truncated last line (a kill mid-write) is skipped with a note; a
malformed line anywhere else is an error naming the file and line.

This module imports neither torch nor matplotlib.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from seqdsl import jsonl
from seqdsl.errors import SeqFileError
from seqdsl.run.layout import CONFIG, METRICS

TRAIN_FIELDS = ("step", "tokens", "loss")
EVAL_FIELDS = ("step", "domain", "in_domain", "loss", "bpb", "seq_len")


@dataclass(frozen=True)
class TrainPoint:
    step: int
    tokens: int
    loss: float


@dataclass(frozen=True)
class EvalPoint:
    step: int
    tokens: int
    domain: str
    in_domain: bool
    loss: float
    bpb: float
    seq_len: int
    recall_loss: float | None = None  # loss on recall tokens (seqdsl/run/recall.py), where recorded
    other_loss: float | None = None  # loss on the other tokens


@dataclass(frozen=True)
class RunMetrics:
    name: str  # the run directory's name
    label: str  # the model trained (config.json "model_name", else "model"), else the run's name
    path: Path
    train: tuple[TrainPoint, ...]  # by step
    evals: tuple[EvalPoint, ...]  # by step, then domain
    notes: tuple[str, ...] = field(default=())


def _need(record: dict, names: tuple[str, ...], where: str) -> None:
    missing = [n for n in names if n not in record]
    if missing:
        raise SeqFileError(f"{where}: {record.get('kind')} record lacks {', '.join(missing)}")


def read_run(run_dir: str | Path) -> RunMetrics:
    """The metrics of the run in `run_dir` (one SeqFileError if it cannot be read)."""
    run = Path(run_dir)
    path = run / METRICS
    if not run.is_dir():
        raise SeqFileError(f"{run}: no such run directory")
    try:
        numbered, cut = jsonl.read(path)
    except FileNotFoundError:
        raise SeqFileError(f"{run} has no {METRICS}", hint="is this a run directory of `seqdsl train`?") from None
    train: dict[int, TrainPoint] = {}
    evals: dict[tuple[int, str, int], EvalPoint] = {}
    notes = [cut] if cut else []
    for number, record in numbered:
        where = f"{path}:{number}"
        try:
            if record.get("kind") == "train":
                _need(record, TRAIN_FIELDS, where)
                train[int(record["step"])] = TrainPoint(int(record["step"]), int(record["tokens"]),
                                                        float(record["loss"]))
            elif record.get("kind") == "eval":
                _need(record, EVAL_FIELDS, where)
                p = EvalPoint(int(record["step"]), int(record.get("tokens", 0)), str(record["domain"]),
                              bool(record["in_domain"]), float(record["loss"]), float(record["bpb"]),
                              int(record["seq_len"]), _optional(record.get("recall_loss")),
                              _optional(record.get("other_loss")))
                evals[(p.step, p.domain, p.seq_len)] = p
        except (TypeError, ValueError) as err:
            raise SeqFileError(f"{where}: bad value in {record.get('kind')} record ({err})") from None
    return RunMetrics(
        name=run.resolve().name, label=_label(run), path=run,
        train=tuple(train[s] for s in sorted(train)),
        evals=tuple(sorted(evals.values(), key=lambda p: (p.step, p.domain, p.seq_len))),
        notes=tuple(notes))


def _optional(value) -> float | None:
    return None if value is None else float(value)


def _label(run: Path) -> str:
    try:
        config = json.loads((run / CONFIG).read_text(encoding="utf-8"))
        # training writes the trained model's name as model_name ("model" is the config's
        # override of the spec's model, usually null)
        model = config.get("model_name") or config.get("model")
    except (OSError, ValueError, AttributeError):
        model = None
    return str(model) if model else run.resolve().name
