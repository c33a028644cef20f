"""AdamW with decoupled weight decay on matrices only, and the warmup + cosine learning rate."""

from __future__ import annotations

import math

import torch


def lr_at(step: int, steps: int, lr: float, warmup: int, min_ratio: float = 0.1) -> float:
    """Linear warmup over `warmup` steps, then a cosine from `lr` down to `lr * min_ratio`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def adamw(model: torch.nn.Module, *, lr: float, weight_decay: float,
          betas: tuple[float, float] = (0.9, 0.95)) -> torch.optim.AdamW:
    """AdamW; weight decay on parameters of 2 or more dimensions (not on norms, biases, gains)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
