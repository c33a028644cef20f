"""The measured dense GEMM rate of a device: the denominator the issue asks MFU against.

Data-sheet peaks (seqdsl/ir/flops.py: PEAK_BF16) are never reached by real GEMMs (an H100 SXM's
989 TFLOP/s bf16 measures ~770 TFLOP/s on large square matmuls), so MFU against the measured
rate says how close the model comes to what the hardware actually delivers. Measure once per
process, before training, on the device the model runs on.
"""

from __future__ import annotations

import time

import torch


def measure_gemm_rate(device, *, dtype: torch.dtype = torch.bfloat16, n: int = 8192, repeats: int = 20,
                      warmup: int = 3) -> float:
    """FLOP/s of an n x n x n matmul in `dtype` on `device` (2 n^3 FLOPs each): the mean rate
    over `repeats` back-to-back calls, timed after `warmup` untimed ones."""
    if n < 1 or repeats < 1:
        raise ValueError(f"n and repeats must be positive, got n={n}, repeats={repeats}")
    device = torch.device(device)
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        a @ b
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync()
    elapsed = time.perf_counter() - start
    return 2.0 * n ** 3 * repeats / elapsed
