"""Initial values of a mixer's mixing parameters, as each family's reference implementation sets
them (docs/lowering.md, "Initialisation", has the table with sources).

Shape legend: H heads, Dk key width (state rows), C = H * Dk key channels, D d_model.

The plan names the family whose initialisation a spec gets (`MixerPlan.init`, seqdsl/ir/plan.py,
from the spec's slots alone); the functions below return that reference's initial tensors, in
float64, for the lowering's parametrisation. Where the lowering parametrises a decay differently
from the reference (the low-rank logsigmoid gate of `decay = data_dependent(vector)` stands in for
Mamba-1's -exp(A_log) softplus(dt) and RWKV's -exp(w)), the gate's bias is set so that the
*initial* per-step decays equal the reference's, and the gate's input weights start at zero where
the reference's data-dependent part does (RWKV's LoRA w1 = 0).

This module computes tensors; the stages' `reset` methods (seqdsl/lower/stages.py) apply them.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from seqdsl.ir.plan import Recipe

# GLA's gate normaliser: log a = logsigmoid(W2 W1 x + b) / 16 (fla/layers/gla.py,
# `gate_logit_normalizer`), the form of every per-channel decay in the lowering
GATE_NORMALISER = 16.0

# Mamba-1/2 and Gated DeltaNet: dt ~ log-uniform [DT_MIN, DT_MAX], floored at DT_FLOOR
DT_MIN, DT_MAX, DT_FLOOR = 1e-3, 1e-1, 1e-4


# --- Mamba-1/2, Gated DeltaNet ------------------------------------------------------------------


def dt_bias(n: int, generator: torch.Generator | None = None) -> Tensor:
    """(n,) softplus^-1(dt), dt = exp(U[log DT_MIN, log DT_MAX]) clamped at DT_FLOOR.
    mamba_ssm/modules/mamba2.py and mamba_simple.py (`dt_init`), fla/layers/gated_deltanet.py:
    inv_dt = dt + log(-expm1(-dt))."""
    u = torch.rand(n, dtype=torch.float64, generator=generator)
    dt = torch.exp(u * (math.log(DT_MAX) - math.log(DT_MIN)) + math.log(DT_MIN)).clamp(min=DT_FLOOR)
    return dt + torch.log(-torch.expm1(-dt))


def a_log(n: int, low: float, high: float = 16.0, generator: torch.Generator | None = None) -> Tensor:
    """(n,) log A, A ~ U[low, high]: Mamba-2's A_init_range (1, 16) (mamba_ssm/modules/mamba2.py);
    Gated DeltaNet's uniform_(0, 16) (fla/layers/gated_deltanet.py)."""
    u = torch.rand(n, dtype=torch.float64, generator=generator)
    return torch.log(low + (high - low) * u)


def s4d_real_log_rate(heads: int, d_state: int) -> Tensor:
    """(heads, d_state) Mamba-1's A_log: S4D-real A_n = n + 1 for every channel
    (`A = repeat(arange(1, d_state + 1), 'n -> d n')`, mamba_ssm/modules/mamba_simple.py)."""
    return torch.arange(1, d_state + 1, dtype=torch.float64).log().expand(heads, d_state).clone()


def mamba1_log_decay(channels: int, d_state: int, generator: torch.Generator | None = None) -> Tensor:
    """(channels, d_state) Mamba-1's initial log decay -A_n dt_c at zero input: S4D-real
    A_n = n + 1 (`A = repeat(arange(1, d_state + 1), 'n -> d n')`, mamba_ssm/modules/
    mamba_simple.py) times dt_c = softplus(dt_bias_c)."""
    dt = torch.nn.functional.softplus(dt_bias(channels, generator))
    A = torch.arange(1, d_state + 1, dtype=torch.float64)
    return -dt[:, None] * A[None, :]


# --- RWKV-6/7 -------------------------------------------------------------------------------------


def _ratios(layer: int, n_layers: int) -> tuple[float, float]:
    """RWKV's ratio_0_to_1 = layer / (L - 1) and ratio_1_to_almost0 = 1 - layer / L."""
    return (layer / (n_layers - 1) if n_layers > 1 else 0.0), 1.0 - layer / n_layers


def _channel_position(C: int) -> Tensor:
    """(C,) n / (C - 1) for channel n (0 for a single channel)."""
    return torch.arange(C, dtype=torch.float64) / max(C - 1, 1)


def rwkv6_log_decay(C: int, layer: int, n_layers: int) -> Tensor:
    """(C,) RWKV-6's initial log decay -exp(time_decay), with
    time_decay_n = -6 + 5 (n / (C - 1))^(0.7 + 1.3 ratio_0_to_1): slow channels first, faster
    along the channels and in deeper layers (RWKV-LM RWKV-v6/src/model.py, RWKV_Tmix_x060)."""
    r01, _ = _ratios(layer, n_layers)
    return -torch.exp(-6 + 5 * _channel_position(C) ** (0.7 + 1.3 * r01))


def rwkv6_bonus(H: int, Dk: int, layer: int, n_layers: int) -> Tensor:
    """(H, Dk) RWKV-6's u (time_faaaa): ratio_0_to_1 (1 - n / (C - 1)) + ((n + 1) % 3 - 1) 0.1."""
    r01, _ = _ratios(layer, n_layers)
    n = torch.arange(H * Dk, dtype=torch.float64)
    zigzag = ((n + 1) % 3 - 1) * 0.1
    return (r01 * (1 - _channel_position(H * Dk)) + zigzag).view(H, Dk)


def _rwkv7_zigzag(C: int, Dk: int) -> Tensor:
    n = torch.arange(C, dtype=torch.float64)
    if Dk == 1:
        return torch.zeros(C, dtype=torch.float64)
    z = ((n % Dk) - (Dk - 1) / 2) / ((Dk - 1) / 2)
    return z * z.abs()


def rwkv7_log_decay(C: int, Dk: int, layer: int, n_layers: int) -> Tensor:
    """(C,) RWKV-7's initial log decay -e^(-0.5) sigmoid(w0) (its w = -softplus(-w0) - 0.5,
    decay exp(-exp(w))), with w0 = -6 + 6 (n / (C - 1))^(1 + ratio_0_to_1^0.3) + 0.5
    + 2.5 zigzag_n (RWKV-LM RWKV-v7/train_temp/src/model.py, RWKV_Tmix_x070;
    fla/layers/rwkv7.py)."""
    r01, _ = _ratios(layer, n_layers)
    www = -6 + 6 * _channel_position(C) ** (1 + r01 ** 0.3)
    w0 = www + 0.5 + _rwkv7_zigzag(C, Dk) * 2.5
    return -math.exp(-0.5) * torch.sigmoid(w0)


def rwkv7_a_bias(C: int, Dk: int) -> Tensor:
    """(C,) RWKV-7's a0 = -0.19 + 0.3 zigzag_n + 0.4 (n / (C - 1) - 0.5): a = sigmoid(a0) at first."""
    return -0.19 + _rwkv7_zigzag(C, Dk) * 0.3 + (_channel_position(C) - 0.5) * 0.4


def token_shift_mix(d_model: int, layer: int, n_layers: int, family: Recipe) -> Tensor:
    """(3, D) the weight of x_(t-1) in the q (receptance), k and v inputs, with
    ddd_i = i / D: RWKV-6 time_maa_r = 1 - ddd^(0.5 r), time_maa_k = 1 - ddd^r,
    time_maa_v = 1 - (ddd^r + 0.3 ratio_0_to_1); RWKV-7 x_r = 1 - ddd^(0.2 r),
    x_k = x_v = 1 - ddd^(0.7 r); r = ratio_1_to_almost0. Other families: 0.5."""
    r01, r1a0 = _ratios(layer, n_layers)
    ddd = torch.arange(d_model, dtype=torch.float64) / d_model
    if family == "rwkv6":
        rows = [1 - ddd ** (0.5 * r1a0), 1 - ddd ** r1a0, 1 - (ddd ** r1a0 + 0.3 * r01)]
    elif family == "rwkv7":
        rows = [1 - ddd ** (0.2 * r1a0), 1 - ddd ** (0.7 * r1a0), 1 - ddd ** (0.7 * r1a0)]
    else:
        rows = [torch.full((d_model,), 0.5, dtype=torch.float64)] * 3
    return torch.stack(rows)


# --- the lowering's per-channel gate --------------------------------------------------------------


def gate_bias_for(log_decay: Tensor) -> Tensor:
    """The bias b with logsigmoid(b) / GATE_NORMALISER = log_decay (all < 0): the per-channel
    gate's value at zero input. sigmoid(b) = e^(-y), y = -16 log a, so b = -log(expm1(y))."""
    y = -GATE_NORMALISER * log_decay
    if torch.any(y <= 0):
        raise ValueError("a decay's log must be negative")
    return -torch.log(torch.expm1(y))
