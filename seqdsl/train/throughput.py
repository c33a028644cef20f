"""Model FLOPs utilisation for the progress display and metrics.

The FLOPs per token are each mixer's real FLOPs (a sparse mixer is not credited with dense
attention), counted from the IR by `seqdsl.ir.flops`, over the device's data-sheet dense bf16
peak (`benchmarks/bench_train.py` also reports MFU against the measured GEMM rate), by the one
formula `seqdsl.ir.flops.mfu`. MFU is None
(null in metrics.jsonl, "n/a" on screen) on CPU and on a GPU without a known peak: nothing is
guessed in its place.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def training_flops_per_token(program, spec, seq_len: int) -> float:
    """Forward + backward FLOPs per token of the model."""
    from seqdsl.ir.flops import flops_per_token

    return flops_per_token(program, spec, seq_len).training


def device_peak_flops(device: torch.device) -> float | None:
    """The data-sheet dense bf16 peak of `device`, or None (the CPU, or a GPU not in the table)."""
    if device.type != "cuda":
        return None
    from seqdsl.ir.flops import peak_bf16_flops

    return peak_bf16_flops(torch.cuda.get_device_name(device))


def mfu_meter(model, seq_len: int, peak_flops: float | None) -> Callable[[float], float | None]:
    """tokens/s -> MFU (a fraction of `peak_flops`: `device_peak_flops`, or a measured GEMM
    rate), or None when there is no peak. `model` is a `seqdsl.train.setup.ResolvedModel`."""
    if peak_flops is None:
        return lambda tokens_per_s: None
    from seqdsl.ir.flops import mfu

    per_token = training_flops_per_token(model.program, model.spec, seq_len)
    return lambda tokens_per_s: mfu(tokens_per_s, per_token, peak_flops)
