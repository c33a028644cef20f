"""Top-1 chunk selection (Exact and Approx) on the generated kernels: forward, decode, backward.

Shape legend: q (B, T, H, Dk); k (B, T, HK, Dk), v (B, T, HK, Dv), HK = H / shared_kv_group(key)
key/value heads read in place (grouped-query attention; else HK = H); o, dO (B, T, H, Dv); C chunk size, N = ceil(T / C) chunks,
N_full = T // C complete chunks; per-query rows (B*H, T): sel (int32, -1 = no candidate), lse,
lsec, gate (float32, log2 units); kbar (B, N_full, HK, Dk) float32 mean keys (Approx).

Steps (each a kernel of the module `seqdsl.codegen.render(key)` produced, except the marked ones):
    forward   [Approx: kbar = chunk means of k, torch, O(T Dk)]
              select     -> sel (+ lsec, gate for the STE; Exact: + gw, the gate's dq direction):
                            scores of every candidate chunk, arg-max
              [bucket    -> perm, starts: queries sorted by selected chunk, torch.sort, O(T log T)]
              attn_fwd   -> per key chunk: the queries that selected it (partial o, lse)
              attn_local -> (local chunk on) each query's own chunk, merged by log-sum-exp
    backward  bwd_delta  -> D = rowsum(dO * o), and GG = D * gate (STE)
              gate_dkbar -> (Approx, STE) the gate's gradient into the mean keys (float32,
                            (B*H, N_full, Dk): programs over (chunk tiles, query slices))
              attn_bwd   -> dq in two parts, each written once: the own chunk's (local attention,
                            Approx's own partial mean) into dq, the selected chunk's into dq_sel;
                            dk, dv; + the gate's gradient into dk (Exact: each candidate chunk's
                            best key; Approx: dkbar / C onto each key of the chunk)
              gate_dq    -> (STE) the gate's gradient into dq, plus both parts, written to dq
                            [grad = none: dq + dq_sel in torch]
Nothing is O(T^2) in memory. The Exact selection (and its STE gradient) reads every earlier key:
O(T^2 Dk) FLOPs; Approx scores N mean keys: O(T^2 Dk / C).
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdsl.ir.key import KernelKey
from seqdsl.ir.key import chunk_size, selection
from seqdsl.kernels import launch
from seqdsl.kernels.cache import load
from seqdsl.kernels.element import triton_cdiv

def _block_c() -> int:
    """Chunk means per tile of the Approx selection scan and decode (the gate kernels have their own,
    launch.gate_tiles): 64 on the GPU; 2 under the interpreter, so that a CPU test's few chunks
    span several tiles."""
    return 2 if launch.interpreted() else 64


def block_m(key: KernelKey, cfg: dict) -> int:
    return min(cfg["BLOCK_M"], chunk_size(selection(key)))  # divides the chunk: one chunk per program


def mean_keys(key: KernelKey, k: Tensor) -> Tensor:
    """(B, N_full, HK, Dk) float32: the mean key of each complete chunk (Approx's chunk score)."""
    B, T, H, Dk = k.shape
    C = chunk_size(selection(key))
    full = T // C
    if full == 0:
        return torch.zeros(B, 1, H, Dk, dtype=torch.float32, device=k.device)  # never read
    return k[:, : full * C].view(B, full, C, H, Dk).mean(2, dtype=torch.float32).contiguous()


def kbar_for(key: KernelKey, k: Tensor) -> Tensor:
    """The mean keys Approx scores with (a placeholder for Exact, which reads the keys)."""
    if selection(key).score == "mean":
        return mean_keys(key, k)
    return torch.zeros(1, 1, 1, 1, dtype=torch.float32, device=k.device)  # Exact reads keys


def select(key: KernelKey, q: Tensor, k: Tensor, kbar: Tensor, *, with_stats: bool):
    """(sel, lsec, gate, gw): sel, lsec, gate (B*H, T), lsec and gate empty unless with_stats;
    gw (B, T, H, Dk) in q's dtype, the gate's dq direction (Exact with stats; else empty)."""
    mod = load(key)
    B, T, H, _ = q.shape
    cfg = launch.tuned("chunk.fwd", launch.tiles(q.shape[-1], q.dtype, train=with_stats))
    bm = block_m(key, cfg)
    sel = torch.empty(B * H, T, dtype=torch.int32, device=q.device)
    n = T if with_stats else 0
    lsec = torch.empty(B * H, n, dtype=torch.float32, device=q.device)
    gate = torch.empty(B * H, n, dtype=torch.float32, device=q.device)
    gw = torch.empty_like(q) if with_stats and selection(key).score == "max" else q.new_empty(0)
    getattr(mod, f"{key.slug()}_select")[(B * H, triton_cdiv(T, bm))](
        q, k, kbar, sel, lsec, gate, gw, *launch.strides(q, k, kbar), T, T, 0, H,
        WITH_STATS=with_stats, BLOCK_M=bm, BLOCK_C=_block_c(), PREC=launch.precision(q.dtype),
        **launch.launch_opts(cfg))
    return sel, lsec, gate, gw


def forward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, *, with_stats: bool):
    """(o, saved): o (B, T, H, Dv) and what the backward needs (a dict of tensors)."""
    mod = load(key)
    B, T, H, _ = q.shape
    Dv = v.shape[-1]
    C = chunk_size(selection(key))
    n_chunks = triton_cdiv(T, C)
    kbar = kbar_for(key, k)
    sel, lsec, gate, gw = select(key, q, k, kbar, with_stats=with_stats)
    perm, starts = launch.bucket(sel, n_chunks)
    cfg = launch.tuned("chunk.fwd", launch.tiles(q.shape[-1], q.dtype, train=with_stats))
    bm = block_m(key, cfg)
    o = torch.empty(B, T, H, Dv, dtype=v.dtype, device=v.device)
    lse = torch.empty(B * H, T, dtype=torch.float32, device=q.device)
    local = selection(key).local
    # local: the selected part goes to (o_sel, lse_sel) and attn_local merges it into (o, lse);
    # otherwise the selected chunk is all a query attends, written straight to (o, lse)
    o_sel = torch.empty(B * H, T if local else 0, Dv, dtype=v.dtype, device=v.device)
    lse_sel = torch.full((B * H, T if local else 0), float("-inf"), dtype=torch.float32, device=q.device)
    common = dict(BLOCK_M=bm, PREC=launch.precision(q.dtype), **launch.launch_opts(cfg))
    getattr(mod, f"{key.slug()}_attn_fwd")[(B * H, n_chunks)](
        q, k, v, perm, starts, o_sel, lse_sel, o, lse, *launch.strides(q, k, v, o), T, H, n_chunks, **common)
    if local:
        getattr(mod, f"{key.slug()}_attn_local")[(triton_cdiv(T, bm), B * H)](
            q, k, v, o_sel, lse_sel, o, lse, *launch.strides(q, k, v, o), T, H, **common)
    saved = dict(sel=sel, lsec=lsec, gate=gate, gw=gw, lse=lse, perm=perm, starts=starts, kbar=kbar)
    return o, saved


def backward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, saved: dict):
    """(dq, dk, dv): the attention's gradients, plus the STE gate's (grad = ste)."""
    mod = load(key)
    name = key.slug()
    B, T, H, Dk = q.shape
    C = chunk_size(selection(key))
    n_chunks = triton_cdiv(T, C)
    full = T // C
    ste = selection(key).grad == "ste"
    local = selection(key).local
    do = do.contiguous()
    # D_i = dO_i . o_i = dL/dG_i, and GG_i = D_i * G_i (STE)
    delta, gg = launch.delta(getattr(mod, f"{name}_bwd_delta"), do, o, saved["gate"] if ste else None)
    cfg = launch.tuned("chunk.bwd", launch.tiles(Dk, q.dtype, train=True))
    bm = block_m(key, cfg)
    common = dict(PREC=launch.precision(q.dtype), **launch.launch_opts(cfg))
    kbar = saved["kbar"]
    dkbar = kbar  # placeholder: read only by Approx with the STE
    if ste:  # the gate kernels' tiles (launch site chunk.gate)
        gcfg = launch.tuned("chunk.gate", launch.gate_tiles(Dk, q.dtype, chunk=C))
        gate = dict(BLOCK_M=block_m(key, gcfg), BLOCK_C=gcfg["BLOCK_C"], PREC=launch.precision(q.dtype),
                    **launch.launch_opts(gcfg))
    if ste and selection(key).score == "mean" and full >= 1:  # queries past chunk 0 score complete chunks
        dkbar = torch.zeros(B * H, full, Dk, dtype=torch.float32, device=q.device)
        split = gcfg["SPLIT_ROWS"]
        getattr(mod, f"{name}_gate_dkbar")[(triton_cdiv(full, gate["BLOCK_C"]), triton_cdiv(T, split), B * H)](
            q, kbar, saved["sel"], saved["lsec"], gg, dkbar, *launch.strides(q, kbar), T, H, full, split, **gate)
    # dq's two parts (module docstring): the own chunk's into dq, the selected chunk's into dq_sel
    dq, dq_sel = torch.empty_like(q), torch.empty_like(q)
    dk, dv = torch.empty_like(k), torch.empty_like(v)  # each key chunk's program writes its rows
    getattr(mod, f"{name}_attn_bwd")[(B * k.shape[2], n_chunks)](  # per key/value head
        q, k, v, do, saved["lse"], delta, saved["perm"], saved["starts"], saved["sel"], saved["lsec"],
        gg if ste else delta, dkbar, dq, dq_sel, dk, dv, *launch.strides(q, k, v, do), T, H, n_chunks, full,
        BLOCK_M=bm, **common)
    if ste:  # gate_dq adds the gate's part to both and writes dq
        getattr(mod, f"{name}_gate_dq")[(B * H, triton_cdiv(T, gate["BLOCK_M"]))](
            q, k, kbar, saved["gw"], saved["sel"], saved["lsec"], gg, dq, dq_sel, *launch.strides(q, k, kbar), T, H,
            **gate)
        return dq, dk, dv
    if not local:  # every query selected a chunk (its own at least): the selected part is all
        return dq_sel, dk, dv
    selected = (saved["sel"] >= 0).view(B, H, T).permute(0, 2, 1)[..., None]  # (B, T, H, 1)
    return dq + torch.where(selected, dq_sel, 0), dk, dv  # chunk-0 queries selected nothing


def decode(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, kv_group: int = 1) -> Tensor:
    """(B, 1, H, Dv): the newest query (position L - 1) against the cache k, v (B, L, H / kv_group, *):
    query head h reads the cache's head h // kv_group."""
    mod = load(key)
    B, _, H, Dk = q.shape
    L = k.shape[1]
    o = torch.empty(B, 1, H, v.shape[-1], dtype=v.dtype, device=v.device)
    kbar = kbar_for(key, k)
    getattr(mod, f"{key.slug()}_decode")[(B * H,)](
        q, k, v, kbar, o, *launch.strides(q, k, v, kbar, o), L, H, KV_GROUP=kv_group, BLOCK_M=16, BLOCK_C=_block_c(),
        PREC=launch.precision(q.dtype), **launch.launch_opts(launch.tiles(Dk, q.dtype, train=False)))
    return o
