"""Where a model runs and in what precision: the one choice `seqdsl train` and `seqdsl eval` share.

`--device auto` is CUDA when a CUDA device is available, else the CPU; `cuda` means the process's
own GPU (its local rank under torchrun, else `cuda:0`). `dtype auto` is bf16 autocast on CUDA and
float32 (no autocast) elsewhere.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from seqdsl.errors import SeqError

DTYPES = ("auto", "float32", "bfloat16")


def device_kind(name: str) -> str:
    """"cuda" or "cpu" (the kind of device `name` asks for), before any process group exists:
    torchrun's backend (NCCL or gloo) depends on it."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if name.startswith("cuda") else "cpu"


def pick_device(name: str, *, local_rank: int | None = None) -> torch.device:
    """The device `name` (auto, cpu, cuda, cuda:N) means; one SeqError when it cannot be had.
    A CUDA device is made the current one; `local_rank` (several processes) picks the GPU."""
    if name == "auto":
        name = device_kind(name)
    try:
        device = torch.device(name)
    except RuntimeError:
        raise SeqError(f"unknown device {name!r}", hint="use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SeqError(f"device {name} asked for, but no CUDA device is available")
        device = torch.device("cuda", local_rank if local_rank is not None else (device.index or 0))
        torch.cuda.set_device(device)
    return device


def autocast_dtype(dtype: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of a `dtype` setting (auto, float32, bfloat16) on `device`; None: no
    autocast (float32)."""
    if dtype not in DTYPES:
        raise SeqError(f"unknown dtype {dtype!r}", hint=f"use {', '.join(DTYPES)}")
    if dtype == "bfloat16" or (dtype == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """torch.autocast to `dtype` on `device`, or nothing when `dtype` is None."""
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()
