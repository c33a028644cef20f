"""Model FLOPs utilisation for the progress display and metrics.

The FLOPs per token are each mixer's real FLOPs (a sparse mixer is not credited with dense
attention), counted from the IR by `seqdsl.ir.flops`, over the device's data-sheet dense bf16
peak (`benchmarks/bench_train.py` also reports MFU against the measured GEMM rate). MFU is None
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


def mfu_meter(model, seq_len: int, device: torch.device) -> Callable[[float], float | None]:
    """tokens/s -> MFU (a fraction of the device's peak), or None when it cannot be computed.
    `model` is a `seqdsl.train.setup.ResolvedModel`."""
    if device.type != "cuda":
        return lambda tokens_per_s: None
    from seqdsl.ir.flops import peak_bf16_flops

    per_token = training_flops_per_token(model.program, model.spec, seq_len)
    peak = peak_bf16_flops(torch.cuda.get_device_name(device))
    if peak is None:
        return lambda tokens_per_s: None
    return lambda tokens_per_s: tokens_per_s * per_token / peak
