"""Top-1 element selection on the generated kernels: forward, decode and the STE backward.

Shape legend: q (B, T, H, Dk); k (B, T, HK, Dk), v (B, T, HK, Dv) with HK = H / G key/value
heads, G = shared_kv_group(key) (grouped-query attention read in place; G = 1: one per query head);
o, dO (B, T, H, Dv); idx (int32) and lse (log2 units, float32) (B*H, T); o_soft (B, T, H, Dv) in the input dtype = p @ v, the soft output the STE's D
term uses; delta (B*H, T) float32 = D.

The kernels live in the module `seqdsl.codegen.render(key)` produced (loaded by kernels/cache.py);
this file allocates and launches them. The hard STE's value gradient (dO summed onto each
query's arg-max row) is a segment sum: the queries sorted by arg-max block (torch.sort, O(T log T)),
then one kernel program per key block (value_grad): O(T Dv), no T x T tensor, no float32 buffer.

Saved for the backward (beyond q, k, v): o_soft (one (B, T, H, Dv) tensor in the input dtype),
idx and lse (8 bytes per query row): tests/kernels/test_saved_memory.py checks the total.

FLOPs (causal, per (batch, head), n = T^2/2 visible pairs): inference forward 2 n Dk (QK^T and a
max: no exp, no P V); training forward 2 n (Dk + Dv) (the soft output for D); backward:
dK kernel 2 n (2 Dk + Dv) [+ 2 n Dv for dv with value_grad = soft], dQ kernel 2 n (2 Dk + Dv);
with FUSE_DQ (kernels/launch.py: backward_tiles) the dK kernel also adds dq, 2 n Dk more, into a
float32 (B, T, H, Dk) buffer with atomics, and the dQ kernel does not run.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdsl.ir.key import KernelKey
from seqdsl.ir.key import selection
from seqdsl.kernels import launch
from seqdsl.kernels.cache import load


def forward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, *, with_soft: bool, q_offset: int = 0,
            kv_group: int = 1):
    """(o, idx, lse, o_soft): lse and o_soft are empty unless `with_soft` (training).
    q may hold fewer rows than k (decoding: its first row sits at position q_offset); k and v
    may hold one head per `kv_group` query heads (a grouped cache or grouped-query attention's keys
    and values, read in place)."""
    mod = load(key)
    name = key.slug()
    B, Tq, H, _ = q.shape
    Tk = k.shape[1]
    Dv = v.shape[-1]
    o = torch.empty(B, Tq, H, Dv, dtype=v.dtype, device=v.device)
    idx = torch.empty(B * H, Tq, dtype=torch.int32, device=q.device)
    lse = torch.empty(B * H, Tq if with_soft else 0, dtype=torch.float32, device=q.device)
    o_soft = torch.empty(B, Tq if with_soft else 0, H, Dv, dtype=v.dtype, device=q.device)
    cfg = launch.tuned("element.fwd", launch.tiles(q.shape[-1], q.dtype, train=False))  # flash shapes either way
    grid = (B * H, triton_cdiv(Tq, cfg["BLOCK_M"]))  # (heads, blocks): the kernels order the work
    getattr(mod, f"{name}_fwd")[grid](
        q, k, v, o, idx, lse, o_soft, *launch.strides(q, k, v, o), Tq, Tk, q_offset, H,
        WITH_SOFT=with_soft, KV_GROUP=kv_group, PREC=launch.precision(q.dtype), **launch.blocks(cfg, "BLOCK_M", "BLOCK_N"),
        **launch.launch_opts(cfg))
    return o, idx, lse, o_soft


def hard_value_grad(key: KernelKey, do: Tensor, idx: Tensor, v: Tensor) -> Tensor:
    """dv_j = sum of dO_i over the queries i whose arg-max is j, of every query head sharing the
    key/value head ((B, T, HK, Dv), v's dtype)."""
    B, T, H, Dv = do.shape
    HK = v.shape[2]
    cfg = launch.tuned("element.value_grad", launch.value_grad_tiles(q_dtype=do.dtype))
    n_blocks = triton_cdiv(T, cfg["BLOCK_N"])
    perm, starts = launch.bucket(torch.div(idx, cfg["BLOCK_N"], rounding_mode="floor"), n_blocks)
    dv = torch.empty_like(v)  # every row is written (zero where no query chose the key)
    getattr(load(key), f"{key.slug()}_value_grad")[(n_blocks, B * HK)](
        do, idx, perm, starts, dv, *launch.strides(do, dv), T, H, n_blocks, PREC=launch.precision(do.dtype),
        **launch.blocks(cfg, "BLOCK_M", "BLOCK_N"), **launch.launch_opts(cfg))
    return dv


def backward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, do: Tensor, idx: Tensor, lse: Tensor,
             o_soft: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of the STE (grad = ste) or of the hard selection alone (grad = none)."""
    sel = selection(key)
    do = do.contiguous()
    soft = sel.value_grad == "soft" and sel.grad == "ste"
    dv = torch.empty_like(v) if soft else hard_value_grad(key, do, idx, v)
    if sel.grad == "none":  # k = 1: q and k get exactly zero gradient (reference docstring)
        return torch.zeros_like(q), torch.zeros_like(k), dv
    return surrogate_backward(key, q, k, v, do, lse, o_soft, dv)


def surrogate_backward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, do: Tensor, lse: Tensor, o_soft: Tensor,
                       dv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) through the STE's surrogate p = softmax over every visible key (the dense
    pass over all key blocks): dq and dk always; dv = p^T dO written into `dv` with value_grad =
    soft, else `dv` returned as given (the hard value gradient, computed by the caller). The top-k
    element kernels (kernels/topk_element.py) take it with their own hard dv."""
    do = do.contiguous()
    mod = load(key)
    name = key.slug()
    B, T, H, _ = q.shape
    # D_i = dO_i . (p @ v)_i with the SOFT output (reference/top1.py); O(T Dv)
    delta, _ = launch.delta(getattr(mod, f"{name}_bwd_delta"), do, o_soft)
    dk = torch.empty_like(k)
    kv_cfg, q_cfg = launch.backward_tiles(q.shape[-1], q.dtype)
    kv_cfg, q_cfg = launch.tuned("element.bwd_dkdv", kv_cfg), launch.tuned("element.bwd_dq", q_cfg)
    fused = bool(kv_cfg["FUSE_DQ"])
    # fused: bwd_dkdv adds dq into a zeroed float32 buffer (cast once at the end); else bwd_dq writes it
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if fused else torch.empty_like(q)
    prec = launch.precision(q.dtype)
    getattr(mod, f"{name}_bwd_dkdv")[(B * k.shape[2], triton_cdiv(T, kv_cfg["BLOCK_N"]))](
        q, k, v, do, lse, delta, dk, dv, dq, *launch.strides(q, k, v, do), T, H, FUSE_DQ=fused, PREC=prec,
        **launch.blocks(kv_cfg, "BLOCK_M", "BLOCK_N"), **launch.launch_opts(kv_cfg))
    if not fused:
        getattr(mod, f"{name}_bwd_dq")[(B * H, triton_cdiv(T, q_cfg["BLOCK_M"]))](
            q, k, v, do, lse, delta, dq, *launch.strides(q, k, v, do), T, H, PREC=prec,
            **launch.blocks(q_cfg, "BLOCK_M", "BLOCK_N"), **launch.launch_opts(q_cfg))
    return dq.to(q.dtype), dk, dv


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
