"""Several processes through `torchrun` (DDP): who am I, and the collectives the loop needs.

`torchrun --nproc_per_node N -m seqdsl train ...` sets RANK / WORLD_SIZE / LOCAL_RANK; without
them the run is one process. Backend: NCCL on CUDA, gloo on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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


def init(device_kind: str) -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_kind == "cuda" else "gloo")
    return Dist(rank, world, local)


def shutdown(d: Dist) -> None:
    if d.world > 1 and dist.is_initialized():
        dist.destroy_process_group()
