"""Top-1 element selection on the generated kernels: forward, decode and the STE backward.

Shape legend: q, k (B, T, H, Dk); v, o, dO (B, T, H, Dv); idx (int32) and lse (log2 units,
float32) (B*H, T); o_soft (B, T, H, Dv) float32 = p @ v, the soft output the STE's D term uses.

The kernels live in the module `seqdsl.codegen.render(key)` produced (loaded by kernels/cache.py);
this file only allocates, launches, and finishes the value gradient of the hard STE (a scatter of
dO onto the arg-max rows, index_add_: O(T Dv), no T x T tensor).

FLOPs (causal, per (batch, head), n = T^2/2 visible pairs): inference forward 2 n Dk (QK^T and a
max: no exp, no P V); training forward 2 n (Dk + Dv) (the soft output for D); backward:
dK kernel 2 n (2 Dk + Dv) [+ 2 n Dv for dv with value_grad = soft], dQ kernel 2 n (2 Dk + Dv).
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdsl.ir.key import KernelKey
from seqdsl.kernels import launch
from seqdsl.kernels.cache import load


def forward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, *, with_soft: bool, q_offset: int = 0):
    """(o, idx, lse, o_soft): lse and o_soft are empty unless `with_soft` (training).
    q may hold fewer rows than k (decoding: its first row sits at position q_offset)."""
    mod = load(key)
    name = key.slug()
    B, Tq, H, _ = q.shape
    Tk = k.shape[1]
    Dv = v.shape[-1]
    o = torch.empty(B, Tq, H, Dv, dtype=v.dtype, device=v.device)
    idx = torch.empty(B * H, Tq, dtype=torch.int32, device=q.device)
    lse = torch.empty(B * H, Tq if with_soft else 0, dtype=torch.float32, device=q.device)
    o_soft = torch.empty(B, Tq if with_soft else 0, H, Dv, dtype=torch.float32, device=q.device)
    cfg = launch.tiles(q.shape[-1], q.dtype, train=False)  # flash-forward shapes either way
    grid = (triton_cdiv(Tq, cfg["BLOCK_M"]), B * H)
    getattr(mod, f"{name}_fwd")[grid](
        q, k, v, o, idx, lse, o_soft, *launch.strides(q, k, v, o), Tq, Tk, q_offset, H,
        WITH_SOFT=with_soft, PREC=launch.precision(q.dtype), **launch.blocks(cfg, "BLOCK_M", "BLOCK_N"),
        **launch.launch_opts(cfg))
    return o, idx, lse, o_soft


def hard_value_grad(do: Tensor, idx: Tensor) -> Tensor:
    """dv_j = sum of dO_i over the queries i whose arg-max is j (float32, (B, T, H, Dv))."""
    B, T, H, Dv = do.shape
    b = torch.arange(B, device=do.device).repeat_interleave(H)[:, None]  # (B*H, 1)
    h = torch.arange(H, device=do.device).repeat(B)[:, None]
    rows = ((b * T + idx.long()) * H + h).reshape(-1)  # flat row of (B, T, H) for key idx
    src = do.float().permute(0, 2, 1, 3).reshape(B * H * T, Dv)  # ordered like idx (b, h, t)
    dv = torch.zeros(B * T * H, Dv, dtype=torch.float32, device=do.device)
    dv.index_add_(0, rows, src)
    return dv.view(B, T, H, Dv)


def backward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, do: Tensor, idx: Tensor, lse: Tensor,
             o_soft: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of the STE (grad = ste) or of the hard selection alone (grad = none)."""
    sel = key.select
    if sel.grad == "none":  # k = 1: q and k get exactly zero gradient (reference docstring)
        return torch.zeros_like(q), torch.zeros_like(k), hard_value_grad(do, idx).to(v.dtype)
    mod = load(key)
    name = key.slug()
    B, T, H, _ = q.shape
    do = do.contiguous()
    # D_i = dO_i . (p @ v)_i with the SOFT output (reference/top1.py); O(T Dv)
    delta = (do.float() * o_soft).sum(-1).permute(0, 2, 1).reshape(B * H, T).contiguous()
    dq, dk = torch.empty_like(q), torch.empty_like(k)
    soft = sel.value_grad == "soft"
    dv = torch.empty_like(v) if soft else hard_value_grad(do, idx).to(v.dtype)
    kv_cfg, q_cfg = launch.backward_tiles(q.shape[-1], q.dtype)
    prec = launch.precision(q.dtype)
    getattr(mod, f"{name}_bwd_dkdv")[(triton_cdiv(T, kv_cfg["BLOCK_N"]), B * H)](
        q, k, v, do, lse, delta, dk, dv, *launch.strides(q, k, v, do), T, H, PREC=prec,
        **launch.blocks(kv_cfg, "BLOCK_M", "BLOCK_N"), **launch.launch_opts(kv_cfg))
    getattr(mod, f"{name}_bwd_dq")[(triton_cdiv(T, q_cfg["BLOCK_M"]), B * H)](
        q, k, v, do, lse, delta, dq, *launch.strides(q, k, v, do), T, H, PREC=prec,
        **launch.blocks(q_cfg, "BLOCK_M", "BLOCK_N"), **launch.launch_opts(q_cfg))
    return dq, dk, dv


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
