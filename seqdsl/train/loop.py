"""A minimal training loop: AdamW, linear warmup then cosine decay, gradient clipping.

Enough to show that a lowered model learns (tests). `seqdsl train` (seqdsl/train/run.py) is the
full pipeline with checkpoints, evaluation and several processes; both share `seqdsl.train.optim`.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor

from seqdsl.train.optim import adamw, lr_at, set_lr


def fit(model: torch.nn.Module, batches: Iterator[tuple[Tensor, Tensor]], steps: int, *,
        lr: float = 3e-3, weight_decay: float = 0.1, warmup: int = 10, clip: float = 1.0,
        device: torch.device | str = "cpu") -> list[float]:
    """Train `model` (a seqdsl LanguageModel) for `steps` steps; return the loss of each step."""
    opt = adamw(model, lr=lr, weight_decay=weight_decay)
    model.train()
    losses = []
    for step in range(steps):
        set_lr(opt, lr_at(step, steps, lr, warmup))
        x, y = next(batches)
        loss = model.loss(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return losses
