"""Training a model on a probe task, and its accuracy at one difficulty.

The loss and the accuracy count the answer tokens only (the batch's mask), as Zoology trains
MQAR: the rest of a row is unpredictable by design. Training batches cycle through the plan's
training levels, one level per batch (levels differ in length, and a batch is one length).

Training and evaluation draw from different seeds, derived from the run's seed, the task and the
level, so every result is reproducible on its own and the evaluation rows are not the training
rows (up to chance collisions, negligible at these sizes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.probe.batch import Batch, Level, Task
from seqdsl.train.optim import adamw, lr_at, set_lr


@dataclass(frozen=True)
class Settings:
    """How a probe trains and evaluates (recorded with every result; resuming needs them equal)."""

    # twice what a tiny Transformer++ needs to leave MQAR's 1/pairs plateau (2 pairs in 16 tokens)
    # and pass 95% (tests/probe/test_learn.py trains 500 steps of 128 rows at lr 1e-3)
    steps: int = 1000
    batch: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.1
    warmup: int = 30
    clip: float = 1.0
    seed: int = 0
    eval_examples: int = 256

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Score:
    accuracy: float  # answer tokens right, of all answer tokens
    exact: float  # rows with every answer right
    answers: int  # answer tokens scored
    examples: int


def derived_seed(*parts: object) -> int:
    """A 63-bit seed from `parts` (stable across runs and Python versions, unlike hash())."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big") >> 1


def answer_logits(lm, inputs: Tensor) -> Tensor:
    """(B, T, V) logits of whole rows from position 0, no state kept (the training body)."""
    return lm.logits(lm.training_hidden(inputs))


def masked_loss(logits: Tensor, batch: Batch) -> Tensor:
    return F.cross_entropy(logits[batch.mask].float(), batch.targets[batch.mask])


def train(lm, task: Task, levels: tuple[Level, ...], settings: Settings, *, device: torch.device,
          progress: Callable[[int, float], None] | None = None) -> list[float]:
    """Train `lm` on `task` at `levels` for `settings.steps` steps (AdamW, warmup then cosine, as
    `seqdsl train`); the loss of each step. `progress(step, loss)` after every step."""
    generator = torch.Generator().manual_seed(derived_seed("train", settings.seed, task.name))
    opt = adamw(lm, lr=settings.lr, weight_decay=settings.weight_decay)
    lm.train()
    losses = []
    for step in range(settings.steps):
        set_lr(opt, lr_at(step, settings.steps, settings.lr, settings.warmup))
        batch = to_device(task.sample(levels[step % len(levels)], settings.batch, generator), device)
        loss = masked_loss(answer_logits(lm, batch.inputs), batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), settings.clip)
        opt.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, losses[-1])
    return losses


@torch.no_grad()
def score(lm, task: Task, level: Level, settings: Settings, *, device: torch.device) -> Score:
    """Accuracy of `lm` (greedy: the argmax at each answer position) on `settings.eval_examples`
    rows of `level`, drawn from their own seed."""
    generator = torch.Generator().manual_seed(derived_seed("eval", settings.seed, task.name, level))
    lm.eval()
    right = answers = exact = 0
    done = 0
    while done < settings.eval_examples:
        n = min(settings.batch, settings.eval_examples - done)
        batch = to_device(task.sample(level, n, generator), device)
        hit = (answer_logits(lm, batch.inputs).argmax(-1) == batch.targets) | ~batch.mask
        right += int((hit & batch.mask).sum())
        answers += int(batch.mask.sum())
        exact += int(hit.all(dim=1).sum())
        done += n
    return Score(right / answers, exact / done, answers, done)


def to_device(batch: Batch, device: torch.device) -> Batch:
    return Batch(batch.inputs.to(device), batch.targets.to(device), batch.mask.to(device))
