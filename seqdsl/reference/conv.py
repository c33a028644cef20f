"""Reference depthwise causal convolution with SiLU, stage (1) of a mixer (Mamba, Mamba-2, Based,
DeltaNet): the oracle that `seqdsl/kernels/causal_conv.py` is tested and self-checked against.

Shape legend
    u       (B, T, C)       the joined projections, one channel per column
    weight  (C, S)          one filter of S taps per channel; tap S-1 reads the current token
    past    (B, S-1, C)     the inputs before u (a decoding cache), zeros at position 0
    y       (B, T, C)       y_t = silu(sum_s weight[:, s] * u_(t + s - (S-1))), u_(<0) from past

A sum over the taps in the (B, T, C) layout: F.conv1d wants (B, C, T), and its transposes and
depthwise kernels cost as much on a GPU as the taps, and far more on a CPU for decoding's few
tokens (docs/mamba.md, the fourth GPU round). The taps are summed in float32 (at least) and y
keeps u's dtype, as mamba's causal_conv1d does: promoted by a float32 weight, bf16 activations
would stay float32, and every op after the convolution (mamba's SSD kernels among them) would
run in float32 under autocast.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def causal_conv_silu(u: Tensor, weight: Tensor, past: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(y, the last S-1 inputs, past included: the next call's `past`)."""
    B, T, C = u.shape
    size = weight.shape[1]
    past = past if past is not None else u.new_zeros(B, size - 1, C)
    full = torch.cat([past, u], dim=1)  # (B, S-1+T, C)
    out = full[:, :T] * weight[:, 0]
    for s in range(1, size):
        out = out + full[:, s:s + T] * weight[:, s]
    return F.silu(out).to(u.dtype), last_inputs(u, past, size)


def last_inputs(u: Tensor, past: Tensor | None, size: int) -> Tensor:
    """(B, size-1, C): the last size-1 inputs of past followed by u (zeros for no past)."""
    B, T, C = u.shape
    keep = size - 1
    recent = u[:, max(T - keep, 0):]
    if recent.shape[1] == keep:
        return recent
    past = past if past is not None else u.new_zeros(B, keep, C)
    return torch.cat([past, recent], dim=1)[:, past.shape[1] + recent.shape[1] - keep:]

