"""One training step's computation, shared by `seqdsl train` (seqdsl/train/run.py) and
benchmarks/bench_train.py, so the benchmark times what users run.

Shape legend: M micro batch, A accumulation steps, T seq_len, D d_model, V vocab.

Nothing here reads a value back to the host: the step returns the mean loss and the gradient
norm as one device tensor, and the caller reads it once per optimizer step (the non-finite check
needs it before the update). A read per micro batch would make the GPU drain its queue A times a
step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdsl.train.device import autocast


def next_token_loss(norm: nn.Module, head: nn.Module, hidden: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy of the head's logits: (M, T, D) hidden states, (M, T) targets -> ().
    The logits (M, T, V) are taken to float32 for the softmax; compiled, the cast, log-softmax
    and gather fuse instead of materialising float32 copies of a 50K-wide vocabulary."""
    logits = head(norm(hidden))  # (M, T, V): bf16 under autocast
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


class CausalLoss(nn.Module):
    """Mean next-token cross-entropy of a LanguageModel: the module a data-parallel wrapper wraps
    (its forward is what DDP hooks), so gradients are averaged over processes.

    `compile=True` compiles each block separately (as torchtitan does: compiling the whole LM
    fails on torch 2.11) and the loss head (final norm, head, cross-entropy) as one function."""

    def __init__(self, lm: nn.Module, *, compile: bool = False):
        super().__init__()
        self.lm = lm
        self.head_loss: Callable[..., Tensor] = next_token_loss
        if compile:
            for block in lm.blocks:
                block.compile()
            self.head_loss = torch.compile(next_token_loss)

    def forward(self, inputs: Tensor, targets: Tensor) -> Tensor:  # (M, T), (M, T) -> ()
        hidden, _ = self.lm.hidden_states(inputs)
        return self.head_loss(self.lm.norm, self.lm.head, hidden, targets)


def training_step(loss_fn: nn.Module, params: Iterable[Tensor], rows: Tensor, micro: int, *,
                  autocast_dtype: torch.dtype | None, clip: float,
                  no_sync: Callable[[], AbstractContextManager] | None = None) -> Tensor:
    """Forward and backward of `rows` (M * A, T + 1) on the device, in A micro batches of M, then
    gradient clipping to norm `clip`. The gradients are those of the mean loss over the rows.
    Returns (mean loss, gradient norm before clipping) as a device tensor of 2, unread.
    `no_sync` (a data-parallel wrapper's) defers the gradient reduction to the last micro batch."""
    if rows.shape[0] % micro:
        raise ValueError(f"{rows.shape[0]} rows do not split into micro batches of {micro}")
    accum = rows.shape[0] // micro
    total = torch.zeros((), device=rows.device)
    for k in range(accum):
        chunk = rows[k * micro: (k + 1) * micro]  # (M, T + 1)
        deferred = no_sync() if no_sync is not None and k < accum - 1 else nullcontext()
        with deferred:
            with autocast(rows.device, autocast_dtype):
                loss = loss_fn(chunk[:, :-1], chunk[:, 1:])
            (loss / accum).backward()
        total += loss.detach()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, clip)
    return torch.stack([total / accum, grad_norm.to(total.dtype)])


def apply_update(optimizer: torch.optim.Optimizer) -> None:
    """The optimizer step, and the gradients dropped (not zeroed: no memset, less memory)."""
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
