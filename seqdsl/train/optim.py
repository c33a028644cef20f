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
    """AdamW; weight decay on parameters of 2 or more dimensions (not on norms, biases, gains).

    The update runs as one fused kernel when every parameter is on a GPU (`fused=True`: a
    per-parameter loop of small kernels costs a 110m model several percent of its step), else
    as multi-tensor `foreach` kernels."""
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    fused = bool(params) and all(p.device.type == "cuda" for p in params)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas,
                             fused=fused or None, foreach=None if fused else True)


def optimizer_for(model: torch.nn.Module, config) -> torch.optim.AdamW:
    """The optimizer `seqdsl train` runs for a `RunConfig` (benchmarks/bench_train.py builds
    the same one)."""
    return adamw(model, lr=config.lr, weight_decay=config.weight_decay, betas=(config.beta1, config.beta2))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
