"""Several processes through `torchrun`: who am I, how the model is spread over the processes
(DDP or FSDP2), and the collectives the loop needs.

`torchrun --nproc_per_node N -m seqdsl train ...` sets RANK / WORLD_SIZE / LOCAL_RANK; without
them the run is one process. Backend: NCCL on CUDA, gloo on CPU.

- DDP: every process holds the whole model and optimizer; gradients are all-reduced (averaged)
  after the last micro batch of a step.
- FSDP2 (`torch.distributed.fsdp.fully_shard`, torchtitan's layout): each Block is one shard
  group, the root (embedding, final norm, head) another; parameters, gradients and AdamW state
  are split over the processes and all-gathered per block around its forward and backward.
  Gradients are reduce-scattered (averaged). On CUDA with bf16 autocast, the gathered parameters
  are bf16 and gradients are reduced in fp32 (the sharded master weights stay fp32); on CPU
  everything is fp32.
"""

from __future__ import annotations

import os
import warnings
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def mean(self, value: float, device: torch.device) -> float:
        """The mean of `value` over processes."""
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.item() / self.world


    def main_first(self, work):
        """`work()` on process 0 first, then on the others once it is done: something every
        process needs and the first one makes (the token cache) is made once."""
        if self.world == 1:
            return work()
        if self.main:
            result = work()
            dist.barrier()
            return result
        dist.barrier()
        return work()


def init(device_kind: str) -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_kind == "cuda" else "gloo")
    return Dist(rank, world, local)


def shutdown(d: Dist, *, failed: bool = False) -> None:
    """Leave the process group. After a run that ended normally every process first waits for the
    others (a barrier): a process tearing gloo down while another still talks to it can abort the
    other with "terminate called without an active exception" (seen once on a loaded 2-core
    machine). After a failure there is no barrier, since the others may never reach it."""
    if d.world > 1 and dist.is_initialized():
        if not failed:
            dist.barrier()
        dist.destroy_process_group()


@dataclass(frozen=True)
class Parallel:
    """The model as the training loop drives it."""

    loss: nn.Module  # what the loop calls: the loss module, DDP-wrapped or over a sharded model
    model: nn.Module  # the LanguageModel (sharded in place under FSDP2)
    kind: str  # "single", "ddp" or "fsdp"

    def micro_batch(self, last: bool) -> AbstractContextManager:
        """Around one micro batch's forward and backward: gradients are reduced over processes only
        after the step's last one. FSDP2 also keeps the gathered parameters between micro batches
        instead of resharding and gathering them again (it costs one unsharded copy of the
        parameters and of the gradients, as DDP holds anyway)."""
        if self.kind == "ddp":
            return nullcontext() if last else self.loss.no_sync()
        if self.kind == "fsdp":
            self.model.set_requires_gradient_sync(last)
            self.model.set_reshard_after_backward(last)
        return nullcontext()


def wrap_model(lm: nn.Module, loss: nn.Module, d: Dist, parallel: str, device: torch.device,
               autocast_dtype: torch.dtype | None) -> Parallel:
    """Spread `lm` over the processes as `parallel` ("ddp" or "fsdp") says; `loss` is the module
    computing the loss from `lm`. One process: neither. Call it before building the optimizer:
    FSDP2 replaces the parameters by sharded ones."""
    if d.world == 1:
        return Parallel(loss, lm, "single")
    if parallel == "ddp":
        ddp = nn.parallel.DistributedDataParallel(loss, device_ids=[device.index] if device.type == "cuda" else None)
        return Parallel(ddp, lm, "ddp")
    if parallel != "fsdp":
        raise ValueError(f"parallel must be ddp or fsdp, not {parallel!r}")  # the config admits no other
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    # FSDP2 warns when a sharded module returns a view (Linear's 3-D output, cached keys in the
    # mixer state): an in-place op on it would skip the backward all-gather. Nothing here writes
    # into a block's or the LM's outputs, and tests/train/test_fsdp.py checks the gradients
    # against one process.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    policy = MixedPrecisionPolicy()  # fp32
    if device.type == "cuda" and autocast_dtype is not None:
        policy = MixedPrecisionPolicy(param_dtype=autocast_dtype, reduce_dtype=torch.float32)
    last = len(lm.blocks) - 1
    for i, block in enumerate(lm.blocks):
        # The last block's parameters would be gathered again at once for the backward (torchtitan).
        fully_shard(block, mp_policy=policy, reshard_after_forward=i < last)
    fully_shard(lm, mp_policy=policy)
    # the compiled training step calls training_hidden, not forward: FSDP2's root hooks (gather
    # the embedding, final norm and head) must run around it too
    register_fsdp_forward_method(lm, "training_hidden")
    return Parallel(loss, lm, "fsdp")
