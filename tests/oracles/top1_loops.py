"""Deliberately naive loop oracles for Top-1 element selection, used only by tests.

They recompute what `seqdsl.reference.top1` defines (its module docstring is the contract) with
Python loops and hand-derived gradient formulas, so a bug shared by the reference and a kernel
cannot hide: one query and one key at a time, no autograd.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

_NEG_INF = float("-inf")


def top1_element_closed_form(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """o_i = v[argmax_{j <= i} q_i . k_j * scale], by a deliberately naive loop (test oracle).

    One query at a time, one key at a time, a strict `>` so the lowest index wins ties."""
    B, T, H, _ = q.shape
    out = torch.zeros(B, T, H, v.shape[-1], dtype=v.dtype, device=v.device)
    with torch.no_grad():
        for b in range(B):
            for h in range(H):
                for i in range(T):
                    best_j, best = 0, float(torch.dot(q[b, i, h], k[b, 0, h])) * scale
                    for j in range(1, i + 1):
                        score = float(torch.dot(q[b, i, h], k[b, j, h])) * scale
                        if score > best:
                            best_j, best = j, score
                    out[b, i, h] = v[b, best_j, h]
    return out


def top1_element_ste_grads(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dout: Tensor,
    *,
    scale: float,
    temperature: float = 1.0,
    value_grad: Literal["hard", "soft"] = "hard",
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of `topk_element_ref(k_top=1, grad="ste")` (causal, no window/alibi), derived
    by hand without autograd: the formulas of the module docstring, for tests."""
    T = q.shape[1]
    i = torch.arange(T, device=q.device)
    causal = i[None, :] <= i[:, None]
    with torch.no_grad():
        s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
        p = torch.softmax((s / temperature).masked_fill(~causal, _NEG_INF), dim=-1)
        # (1) g_ij = dO_i . v_j: how much the loss wants weight on key j.
        g = torch.einsum("bihd,bjhd->bhij", dout, v)
        # (2) D_i = sum_l p_il g_il = dO_i . (p @ v)_i: the soft output, not the hard one.
        d = (p * g).sum(dim=-1, keepdim=True)
        # (3) softmax backward: ds_ij = p_ij (g_ij - D_i) / tau; then through s = q.k * scale.
        ds = p * (g - d) / temperature
        dq = torch.einsum("bhij,bjhd->bihd", ds, k) * scale
        dk = torch.einsum("bhij,bihd->bjhd", ds, q) * scale
        # (4) values: the one-hot argmax (hard) or the surrogate p (soft).
        if value_grad == "hard":
            w = F.one_hot(p.argmax(dim=-1), T).to(p.dtype)
        else:
            w = p
        dv = torch.einsum("bhij,bihd->bjhd", w, dout)
    return dq, dk, dv
