"""An exact oracle of the decayed softmax, used by tests and benchmarks/score_bias_precision.py.

The decay bias is summed exactly: every float64 of magnitude >= 2^-1074 is an integer multiple of 2^-1074, so scaled by 2^1100 the
log decays are Python integers: their prefix sums and differences are exact, and one division
rounds each segment sum correctly. O(T^2) big-integer operations: seconds at T = 1024.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.reference.attention import attention_ref

SCALE = 2 ** 1100


def exact_segment_sums(log_decay: Tensor) -> Tensor:
    """(H, T) float64 -> (H, T, T) [i, j] = sum_{j < s <= i} log a_s rounded once (0 for j >= i)."""
    H, T = log_decay.shape
    out = torch.zeros(H, T, T, dtype=torch.float64)
    for h in range(H):
        prefix = [0]
        for value in log_decay[h].tolist():
            num, den = float(value).as_integer_ratio()
            prefix.append(prefix[-1] + num * (SCALE // den))
        out[h] = torch.tensor([[(prefix[i + 1] - prefix[j + 1]) / SCALE if j < i else 0.0
                                for j in range(T)] for i in range(T)], dtype=torch.float64)
    return out


def decayed_softmax_oracle(m, x: Tensor) -> Tensor:
    """(B, T, D) the output of a lowered `heads, head_dim, decay = data_dependent(scalar)` softmax
    mixer (no conv, position, norm or gate), recomputed from its parameters in float64 with the
    exact decay bias: log a = -exp(A_log) softplus(W_dt x + b)."""
    x = x.double()
    B, T, _ = x.shape
    W = {name: p.detach().double() for name, p in m.named_parameters()}
    q, k, v = ((x @ W[f"{n}_proj.weight"].T).view(B, T, m.plan.layout.heads, -1) for n in "qkv")
    log_decay = -torch.exp(W["A_log"]) * F.softplus(x @ W["dt_proj.weight"].T + W["dt_proj.bias"])
    o = torch.cat([attention_ref(q[b:b + 1], k[b:b + 1], v[b:b + 1], scale=1 / math.sqrt(m.plan.layout.key_dim),
                                 bias=exact_segment_sums(log_decay[b].T)) for b in range(B)])
    return o.reshape(B, T, -1) @ W["o_proj.weight"].T
