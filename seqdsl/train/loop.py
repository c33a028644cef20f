"""A minimal training loop: AdamW, linear warmup then cosine decay, gradient clipping.

Enough to show that a lowered model learns (tests, smoke runs). The full pretraining pipeline
(checkpoints, resume, evaluation, several GPUs) builds on this.
"""

from __future__ import annotations

import math
from typing import Iterator

import torch
from torch import Tensor


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def fit(model: torch.nn.Module, batches: Iterator[tuple[Tensor, Tensor]], steps: int, *,
        lr: float = 3e-3, weight_decay: float = 0.1, warmup: int = 10, clip: float = 1.0,
        device: torch.device | str = "cpu") -> list[float]:
    """Train `model` (a seqdsl LanguageModel) for `steps` steps; return the loss of each step."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    model.train()
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        x, y = next(batches)
        loss = model.loss(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return losses
