"""One training step's computation, shared by `seqdsl train` (seqdsl/train/run.py) and
benchmarks/bench_train.py, so the benchmark times what users run.

Shape legend: M micro batch, A accumulation steps, T seq_len, D d_model, V vocab.

Nothing here reads a value back to the host: the step returns the mean loss and the gradient
norm as one device tensor, and the caller reads it once per optimizer step (the non-finite check
needs it before the update). A read per micro batch would make the GPU drain its queue A times a
step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from seqdsl.lower.lm import block_hidden
from seqdsl.run.device import autocast


def next_token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy: (M, T, V) logits, (M, T) targets -> (). The logits are taken to float32
    for the softmax; compiled, the cast, log-softmax and gather fuse instead of materialising
    float32 copies of a 50K-wide vocabulary."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


class CausalLoss(nn.Module):
    """Mean next-token cross-entropy of a LanguageModel: the module a data-parallel wrapper wraps
    (its forward is what DDP hooks), so gradients are averaged over processes. Eager, it calls the
    model's own forward (with its checks), so FSDP2's hooks on the model (gathering the embedding,
    final norm and head) run.

    `compile=True` compiles the model's body (`LanguageModel.training_hidden`: every block; the
    embedding too with scope "model") and its head with the loss (final norm, head, float32
    cross-entropy); an uncompiled head ran the 50,257-wide GEMM on an unaligned cuBLAS kernel.
    `scope` says how the body is compiled:
      "model"   one graph of every block: compilation grows with the depth (minutes for the
                chunked recurrences), at the same tokens/s as "block" (within 0.35% on an H200,
                docs/training.md);
      "block"   one function `block_hidden(block, x)` compiled for all blocks: blocks of one
                structure share its graph (the block is an argument, its parameters inputs), so
                a 12-block model compiles about one block's worth. Blocks that differ get graphs
                of their own, up to one per block (the recompile limit is raised to the depth:
                past dynamo's limit it would run the rest eagerly, silently).
    `cuda_graphs=True` compiles with mode "reduce-overhead": replayed as CUDA graphs (on a GPU;
    torch.compile warns and runs without graphs elsewhere). Call `lm.plan_paths` first:
    planning cannot be traced."""

    def __init__(self, lm: nn.Module, *, compile: bool = False, cuda_graphs: bool = False,
                 scope: str = "block"):
        super().__init__()
        if cuda_graphs and not compile:
            raise ValueError("cuda_graphs needs compile")
        if scope not in ("model", "block"):
            raise ValueError(f"compile scope must be 'model' or 'block', got {scope!r}")
        self.lm = lm
        self.compile = compile
        self.cuda_graphs = cuda_graphs
        self.scope = scope
        self._compiled: tuple[Callable[[Tensor], Tensor], Callable[[Tensor, Tensor], Tensor]] | None = None

    def _graphs(self) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor, Tensor], Tensor]]:
        """The two compiled functions, made at the first call: by then FSDP2 has registered
        `training_hidden` as a forward method (seqdsl/train/distributed.py), and the compiled body
        must be that registered method, whose hooks gather the sharded embedding; compiled
        earlier, it would be the bare method, and see sharded weights."""
        if self._compiled is None:
            mode = "reduce-overhead" if self.cuda_graphs else None
            head_loss = torch.compile(self._head_loss, mode=mode)
            if self.scope == "model":
                self._compiled = (torch.compile(self.lm.training_hidden, mode=mode), head_loss)
            else:
                _allow_recompiles(len(self.lm.blocks) + 1)
                self._compiled = (functools.partial(self.lm.training_hidden,
                                                    run_block=torch.compile(block_hidden, mode=mode)), head_loss)
        return self._compiled

    def _head_loss(self, hidden: Tensor, targets: Tensor) -> Tensor:
        return next_token_loss(self.lm.logits(hidden), targets)

    def forward(self, inputs: Tensor, targets: Tensor) -> Tensor:  # (M, T), (M, T) -> ()
        if not self.compile:
            logits, _ = self.lm(inputs)
            return next_token_loss(logits, targets)
        if self.cuda_graphs:
            # each micro batch is a new generation of graph replays: the previous one's outputs
            # (its loss, read by then) may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        body, head_loss = self._graphs()
        return head_loss(body(inputs), targets)


def _allow_recompiles(graphs: int) -> None:
    """Let dynamo keep `graphs` graphs of one function (one per block at most, and the head),
    process-wide: past its limit (8 by default) it would run the remaining blocks eagerly, with
    only a warning. The setting was `cache_size_limit` before torch 2.7."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, name, max(getattr(config, name), graphs))


def allocate_grads(params: Iterable[Tensor]) -> None:
    """Give every trainable parameter a zeroed `.grad` it keeps for the whole run.

    Under CUDA graphs (`cuda_graphs = true`) the backward's gradients are outputs of a graph,
    living in its memory pool. Autograd installs an incoming gradient as `.grad` itself when the
    parameter has none (it "steals" the tensor); the next micro batch's replay then overwrites
    that memory, and the step dies with "accessing tensor output of CUDAGraphs that has been
    overwritten" or, worse, accumulates into it. With `.grad` allocated beforehand, autograd adds
    every micro batch's gradient into it in place, in ordinary memory, and nothing of a graph's
    pool outlives its replay. `apply_update(..., keep_grads=True)` zeroes instead of dropping."""
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


def training_step(loss_fn: nn.Module, params: Iterable[Tensor], rows: Tensor, micro: int, *,
                  autocast_dtype: torch.dtype | None, clip: float,
                  micro_batch: Callable[[bool], AbstractContextManager] | None = None,
                  keep_grads: bool = False) -> Tensor:
    """Forward and backward of `rows` (M * A, T + 1) on the device, in A micro batches of M, then
    gradient clipping to norm `clip`. The gradients are those of the mean loss over the rows.
    Returns (mean loss, gradient norm before clipping) as a device tensor of 2, unread.
    `micro_batch(last)` (seqdsl/train/distributed.py: Parallel.micro_batch) is entered around each
    micro batch's forward and backward; a data-parallel layout uses it to reduce the gradients only
    after the last one. `keep_grads` (set with CUDA graphs): gradients accumulate into `.grad`
    tensors allocated before the first backward (see `allocate_grads`)."""
    if rows.shape[0] % micro:
        raise ValueError(f"{rows.shape[0]} rows do not split into micro batches of {micro}")
    params = list(params)
    if keep_grads:
        allocate_grads(params)
    accum = rows.shape[0] // micro
    total = torch.zeros((), device=rows.device)
    for k in range(accum):
        chunk = rows[k * micro: (k + 1) * micro]  # (M, T + 1)
        around = micro_batch(k == accum - 1) if micro_batch is not None else nullcontext()
        with around:
            with autocast(rows.device, autocast_dtype):
                loss = loss_fn(chunk[:, :-1], chunk[:, 1:])
            (loss / accum).backward()
        total += loss.detach()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, clip)
    if isinstance(grad_norm, DTensor):  # FSDP2's sharded parameters: the norm over all shards
        grad_norm = grad_norm.full_tensor()
    return torch.stack([total / accum, grad_norm.to(total.dtype)])


def apply_update(optimizer: torch.optim.Optimizer, *, keep_grads: bool = False) -> None:
    """The optimizer step, then the gradients dropped (no memset, less memory), or zeroed in
    place with `keep_grads` (CUDA graphs: see `allocate_grads`)."""
    optimizer.step()
    optimizer.zero_grad(set_to_none=not keep_grads)
