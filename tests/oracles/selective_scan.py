"""Mamba-1's selective scan, written from its published definition (Gu & Dao 2023, Algorithm 2;
the recurrence of mamba-ssm's `selective_scan_ref`), in mamba-ssm's own layout: a test-only
oracle for the mapping in seqdsl/lower/backends/mamba_scan.py. It imports nothing from mamba-ssm.

Shape legend: b batch, d channels, l steps, n state entries, g groups (each shared by d / g
consecutive channels).

    x_t = exp(delta_t A) * x_(t-1) + delta_t B_t u_t        x (b, d, n)        y_t = x_t . C_t
"""

from __future__ import annotations

import torch
from torch import Tensor


def selective_scan_loop(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor,
                        initial_state: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """u, delta (b, d, l), A (d, n), B and C (b, g, n, l), initial state (b, d, n) or None.
    Step by step; returns (y (b, d, l), last state (b, d, n))."""
    b, d, l = u.shape
    Bd, Cd = (t.repeat_interleave(d // t.shape[1], dim=1) for t in (B, C))  # (b, d, n, l)
    x = u.new_zeros(b, d, A.shape[1]) if initial_state is None else initial_state
    ys = []
    for t in range(l):
        x = (delta[:, :, t, None] * A).exp() * x + delta[:, :, t, None] * Bd[..., t] * u[:, :, t, None]
        ys.append((x * Cd[..., t]).sum(-1))
    return torch.stack(ys, dim=-1), x
