"""What every probe task produces and how its difficulty is named.

Shape legend: B examples, T positions.

A `Batch` is teacher-forced: position t of `inputs` is what the model has read, `targets[t]` what
it should predict there, and `mask[t]` whether that prediction is scored. Only answer tokens are
scored (and trained on): the filler, keys and noise of a task are unpredictable by design, and
counting them would drown the answers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from seqdsl.errors import SeqError


class ProbeError(SeqError):
    """A probe that cannot be run as asked: unknown task, impossible difficulty..."""


@dataclass(frozen=True)
class Batch:
    inputs: Tensor  # (B, T) int64 token ids
    targets: Tensor  # (B, T) int64
    mask: Tensor  # (B, T) bool: the answer positions, the only ones scored

    @staticmethod
    def from_rows(rows: Tensor, mask: Tensor) -> "Batch":
        """A batch of rows (B, T + 1) read as a language model reads text: inputs rows[:, :-1],
        targets rows[:, 1:]; `mask` (B, T) over the targets."""
        return Batch(rows[:, :-1].contiguous(), rows[:, 1:].contiguous(), mask)


@dataclass(frozen=True, order=True)
class Level:
    """One difficulty of a task: its sequence length and the task's own knobs (pairs, string
    length...), as sorted (name, value) pairs so that a level is hashable, ordered and JSON-able."""

    seq_len: int
    knobs: tuple[tuple[str, int], ...] = ()

    def get(self, name: str) -> int:
        return dict(self.knobs)[name]

    def as_dict(self) -> dict[str, int]:
        return {"seq_len": self.seq_len, **dict(self.knobs)}

    @staticmethod
    def of(seq_len: int, **knobs: int) -> "Level":
        return Level(seq_len, tuple(sorted(knobs.items())))

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.as_dict().items())


@dataclass(frozen=True)
class Plan:
    """What a task trains on and what it is evaluated at: every training batch is drawn at one
    of `train` (in turn), and a record is written for each of `evaluate`."""

    train: tuple[Level, ...]
    evaluate: tuple[Level, ...]


class Task(ABC):
    """A probe task. `sample` draws a batch from a torch.Generator; `answer` is the oracle: the
    correct prediction at the last position of `prefix` (a row's inputs up to and including that
    position), computed from the prefix alone."""

    name: str
    vocab: int  # token ids 0 .. vocab-1, inputs and targets alike
    text_name: str | None = None  # the real text a task draws from, if any (records say it)

    @abstractmethod
    def sample(self, level: Level, n: int, generator: torch.Generator) -> Batch: ...

    @abstractmethod
    def answer(self, prefix: Sequence[int], level: Level) -> int: ...

    @abstractmethod
    def chance(self, level: Level) -> float:
        """The accuracy of guessing an answer uniformly among the tokens an answer can be."""

    @abstractmethod
    def plan(self, seq_len: int) -> Plan:
        """The default difficulties around a base sequence length (`seqdsl probe --seq-len`)."""

    def check_level(self, level: Level) -> None:
        """ProbeError when `level` cannot be generated, saying why."""
        return  # a task without limits accepts every level; the others say what they refuse


def oracle_predictions(task: Task, batch: Batch, level: Level) -> Tensor:
    """The oracle's prediction at every answer position of `batch` (B, T), -1 elsewhere; each one
    computed from that row's inputs up to the position, nothing after it."""
    preds = torch.full_like(batch.targets, -1)
    rows = batch.inputs.tolist()
    for b, t in batch.mask.nonzero().tolist():
        preds[b, t] = task.answer(rows[b][: t + 1], level)
    return preds


def randperm_rows(n: int, size: int, generator: torch.Generator) -> Tensor:
    """(n, size): a random permutation of 0 .. size-1 in each row."""
    return torch.rand(n, size, generator=generator).argsort(dim=1)


def randint(low: int, high: int, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    return torch.randint(low, high, shape, generator=generator, dtype=torch.long)
