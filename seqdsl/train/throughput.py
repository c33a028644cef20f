"""Model FLOPs utilisation for the progress display and metrics.

The FLOPs per token are each mixer's real FLOPs (a sparse mixer is not credited with dense
attention), counted from the IR by `seqdsl.ir.flops` (the `eval` branch), over the device's
data-sheet dense bf16 peak (`benchmarks/bench_train.py` also reports MFU against the measured
GEMM rate). MFU is None (null in metrics.jsonl, "n/a" on screen) on CPU, on a GPU without a
known peak, and while `seqdsl.ir.flops` is not installed (MERGE NOTE: it is not on the `train`
branch; nothing is guessed in its place).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def training_flops_per_token(program, spec, seq_len: int) -> float | None:
    """Forward + backward FLOPs per token of the model, or None without `seqdsl.ir.flops`."""
    try:
        from seqdsl.ir.flops import flops_per_token
    except ImportError:
        return None
    return flops_per_token(program, spec, seq_len).training


def mfu_meter(model, seq_len: int, device: torch.device) -> Callable[[float], float | None]:
    """tokens/s -> MFU (a fraction of the device's peak), or None when it cannot be computed.
    `model` is a `seqdsl.train.setup.ResolvedModel`."""
    if device.type != "cuda":
        return lambda tokens_per_s: None
    try:
        from seqdsl.ir.flops import peak_bf16_flops
    except ImportError:
        return lambda tokens_per_s: None
    per_token = training_flops_per_token(model.program, model.spec, seq_len)
    peak = peak_bf16_flops(torch.cuda.get_device_name(device))
    if per_token is None or peak is None:
        return lambda tokens_per_s: None
    return lambda tokens_per_s: tokens_per_s * per_token / peak
