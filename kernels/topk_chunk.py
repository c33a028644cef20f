"""Top-k chunk selection, k > 1, lse chunk scores or sink tokens (seqdsl.ir.key.runs_topk_kernels), on the
generated kernels (codegen/templates/topk_chunk.py.jinja):
forward, decode and backward, with the STE gate's gradient (grad = ste) or none (grad = none).

Shape legend: q (B, T, H, Dk); k (B, T, HK, Dk), v (B, T, HK, Dv), HK = H / shared_kv_group(key);
o, dO (B, T, H, Dv); K = the key's k chunks per query, C chunk size, N = ceil(T / C) chunks;
sel (B*H, T, K) int32 (-1: an empty slot); a pair p = t * K + slot; lse (B*H, T) float32 log2.

Steps (kernels of the module `seqdsl.codegen.render(key)` produced, except the marked ones):
    forward   [Approx: kbar = chunk means of k, torch, O(T Dk)]
              select    -> sel: every candidate chunk scored, the K best kept in registers
                           (STE, training: + lsec, gate: the candidates' log-sum-exp and G)
              [bucket   -> perm, starts: the (query, slot) pairs sorted by chunk, torch.sort]
              attn_fwd  -> per key chunk: the pairs that selected it, partial (o, lse) per pair
              merge     -> the own chunk (local on), the K partials and (sink = n) the sink tokens
                           outside every attended chunk, by log-sum-exp: o, lse
    backward  bwd_delta -> D = rowsum(dO * o)
              gate_dq   -> (STE) the gate's dq through every candidate's score (float32)
              gate_dk   -> (STE) the gate's dk per key chunk (float32), which attn_bwd adds to
                           its own before storing dk once
              attn_bwd  -> per key chunk (and key/value head): dk, dv of its keys, dq of its own
                           queries (local on) and of each pair that selected it (float32, per pair)
              sink_bwd  -> (sink = n) per query block: the sink keys' dq part, and the block's part
                           of their dk, dv [summed over blocks and into dk, dv, torch]
              dq_sum    -> dq: the pairs' parts over the slots, plus the own chunk's, the
                           gate's and the sinks' [those two added first, torch], rounded once
Chunks chosen per key/value group (`share = group`, seqdsl/ir/support.py `group_attention`):
    forward   select    -> lsec only: each head's log-sum-exp over its candidates
              select_shared -> sel: the group's ranking (summed softmax), every head's row
              group_fwd -> per (query, group): the group's heads as one tile's rows over each
                           chosen chunk (loaded once) and the own chunk: o, lse directly
    backward  bwd_delta, then group_dq -> per (query, group): dq directly
              [bucket   -> the group's pairs sorted by chunk (one list per group), torch.sort]
              attn_bwd  -> per key chunk and key/value head: dk, dv (no dq parts)
Chunks longer than a tile (MoBA's 512 tokens; seqdsl/ir/support.py: `attention_key`): `select`
(the chunks' own module) ranks whole chunks by their mean keys; the chosen chunks become their
tiles of 128 and the own chunk's earlier tiles become selected tiles too [torch, `_tiles`]; the
attention steps run the module of the tiles' key (chunk 128, k * S + S - 1 slots, S tiles a chunk).
Memory beyond the inputs: O(T K (Dv + Dk)) float32 for the pairs' partials and dq parts (per
group: none, only sel, lse and the pair lists), and with sinks O(T / BLOCK_M * n (Dk + Dv)) for
the blocks' sink-key parts; nothing is T x T or T x N.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdsl.codegen.choices import chunk_slots, sorted_select
from seqdsl.ir.key import KernelKey, chunk_size, selection, selection_group
from seqdsl.ir.support import attention_key, chunk_split, group_attention, sink_tile
from seqdsl.kernels import launch
from seqdsl.kernels.cache import load
from seqdsl.kernels.chunk import block_m, kbar_for
from seqdsl.kernels.element import triton_cdiv


def _block_c() -> int:
    """Mean keys per scan tile (Approx): 16 on the GPU; 2 under the interpreter, so that a CPU
    test's few chunks span several tiles. A sorted selection (codegen/choices.py, sorted_select)
    widens it to the top-k list's width when that is wider (a tile merges into the list by one sort)."""
    return 2 if launch.interpreted() else 16


def forward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, *, q_offset: int = 0,
            with_stats: bool = False) -> tuple[Tensor, dict]:
    """(o, saved): o (B, Tq, H, Dv); q's first row sits at position q_offset of k and v
    (decoding: one row at L - 1); saved holds what the backward needs (lse, perm, starts, sel,
    kbar, and with `with_stats` (training with the STE) lsec and gate; else those are empty).
    Chunks longer than a tile are chosen whole and attended as tiles (`attention_key`): sel,
    perm and starts are then the tiles'."""
    B, Tq, H, Dk = q.shape
    cfg = launch.tuned("topk_chunk.fwd", launch.topk_tiles(Dk, q.dtype, train=False))
    common = dict(PREC=launch.precision(q.dtype), **launch.launch_opts(cfg))
    kbar = kbar_for(key, k)
    # the selection's own tiles: with the attention's 32 queries it took 0.122 ms against 0.062
    # (MoBA k 3 of 128, 16 x 2048 tokens, 12 heads, D 64, H200, 2026-11-28)
    scfg = launch.tuned("topk_chunk.select", launch.tiles(Dk, q.dtype, train=False))
    sel, lsec, gate = _select(key, q, k, kbar, q_offset, with_stats, scfg)
    attend = attention_key(key)
    if attend != key:
        sel = _tiles(sel, chunk_split(selection(key)), chunk_size(selection(attend)), q_offset)
    if group_attention(attend):
        o, lse = _group_forward(attend, q, k, v, sel, q_offset)
        perm, starts = (torch.empty(0, dtype=torch.int32, device=q.device) for _ in range(2))  # the backward's
        return o, dict(lse=lse, perm=perm, starts=starts, sel=sel, lsec=lsec, gate=gate, kbar=kbar)
    mod = load(attend)
    name = attend.slug()
    Tk, Dv = k.shape[1], v.shape[-1]
    K = selection(attend).k
    n_chunks = triton_cdiv(Tk, chunk_size(selection(attend)))
    bm = block_m(attend, cfg)
    perm, starts = launch.bucket(sel.view(B * H, Tq * K), n_chunks)
    o_pairs = torch.empty(B * H, Tq * K, Dv, dtype=torch.float32, device=q.device)
    lse_pairs = torch.full((B * H, Tq * K), float("-inf"), dtype=torch.float32, device=q.device)
    getattr(mod, f"{name}_attn_fwd")[(B * H, n_chunks)](
        q, k, v, perm, starts, o_pairs, lse_pairs, *launch.strides(q, k, v), Tq, Tk, q_offset, H, n_chunks,
        BLOCK_M=bm, **common)
    o = torch.empty(B, Tq, H, Dv, dtype=v.dtype, device=v.device)
    lse = torch.empty(B * H, Tq, dtype=torch.float32, device=q.device)
    sunk = (sel,) if selection(attend).sink else ()  # the sinks outside the attended chunks: merge reads sel
    getattr(mod, f"{name}_merge")[(triton_cdiv(Tq, bm), B * H)](
        q, k, v, o_pairs, lse_pairs, *sunk, o, lse, *launch.strides(q, k, v, o), Tq, Tk, q_offset, H, BLOCK_M=bm,
        **common)
    return o, dict(lse=lse, perm=perm, starts=starts, sel=sel, lsec=lsec, gate=gate, kbar=kbar)


def _select(key: KernelKey, q: Tensor, k: Tensor, kbar: Tensor, q_offset: int, with_stats: bool,
            cfg: dict) -> tuple[Tensor, Tensor, Tensor]:
    """(sel, lsec, gate): the k chosen chunks of every query (B*H, Tq, k), and with `with_stats`
    the candidates' log-sum-exp and the gate G (B*H, Tq), else empty."""
    mod = load(key)
    B, Tq, H, _ = q.shape
    K = selection(key).k
    bm = block_m(key, cfg)
    common = dict(PREC=launch.precision(q.dtype), **launch.launch_opts(cfg))
    share = selection_group(key)
    sel = torch.empty(B * H, Tq, K, dtype=torch.int32, device=q.device)
    # heads choosing together: `select` gives each head's log-sum-exp over its candidates (its
    # own choice is not used), then `select_shared` ranks by the group's summed probabilities
    stats = with_stats or share > 1
    lsec = torch.empty(B * H, Tq if stats else 0, dtype=torch.float32, device=q.device)
    gate = torch.empty(B * H, Tq if with_stats else 0, dtype=torch.float32, device=q.device)
    # a sorted selection merges a tile into the running list of KSLOTS (codegen/choices.py)
    block_c = max(_block_c(), chunk_slots(K)) if sorted_select(selection(key)) else _block_c()
    getattr(mod, f"{key.slug()}_select")[(B * H, triton_cdiv(Tq, bm))](
        q, k, kbar, sel, lsec, gate, *launch.strides(q, k, kbar), Tq, k.shape[1], q_offset, H, WITH_STATS=stats,
        BLOCK_M=bm, BLOCK_C=block_c, **common)
    if share > 1:
        getattr(mod, f"{key.slug()}_select_shared")[(B * H // share, triton_cdiv(Tq, bm))](
            q, k, kbar, lsec, sel, *launch.strides(q, k, kbar), Tq, k.shape[1], q_offset, H, BLOCK_M=bm,
            BLOCK_C=block_c, **common)
        lsec = torch.empty(B * H, 0, dtype=torch.float32, device=q.device)  # kept for the STE only (none here)
    return sel, lsec, gate


def _group_forward(attend: KernelKey, q: Tensor, k: Tensor, v: Tensor, sel: Tensor,
                   q_offset: int) -> tuple[Tensor, Tensor]:
    """(o, lse) per (query, key/value group): each query's group of heads over the chunks the
    group chose and its own chunk, in one pass (`group_fwd`)."""
    B, Tq, H, Dk = q.shape
    o = torch.empty(B, Tq, H, v.shape[-1], dtype=v.dtype, device=v.device)
    lse = torch.empty(B * H, Tq, dtype=torch.float32, device=q.device)
    getattr(load(attend), f"{attend.slug()}_group_fwd")[(Tq, B * k.shape[2])](
        q, k, v, sel, o, lse, *launch.strides(q, k, v, o), Tq, k.shape[1], q_offset, H,
        PREC=launch.precision(q.dtype), **launch.launch_opts(_group_tiles(Dk)))
    return o, lse


def _group_tiles(dim: int) -> dict:
    """Launch options of the per-group kernels: a tile is the group's heads (16 rows at NSA's
    16:1) by one chunk, so few warps: at D 64 one warp beat 2, 4 and 8 (H200, 64K tokens, 16:1,
    k = 16 of 64: forward 4.7 / 5.9 / 6.8 / 9.6 ms, dq 5.7 / 7.3 / 7.6 / 9.2 ms;
    benchmarks/results/topk_shared_h200_2026-11-28/); D 128 takes two (not measured)."""
    return launch.tuned("topk_chunk.group", dict(num_warps=2 if dim > 64 else 1, num_stages=1))


def _tiles(sel: Tensor, split: int, tile: int, q_offset: int) -> Tensor:
    """The tiles a query attends, from the chunks it chose (sel (B*H, Tq, k), chunks of
    split * tile keys, -1 empty): each chosen chunk's `split` tiles, then the tiles of its own
    chunk before its own tile (-1 where there are fewer); (B*H, Tq, k * split + split - 1). The
    own tile is the attention kernels' local tile."""
    BH, Tq, _ = sel.shape
    within = torch.arange(split, dtype=torch.int32, device=sel.device)
    chosen = torch.where(sel[..., None] >= 0, sel[..., None] * split + within, -1).flatten(2)
    pos = torch.arange(Tq, dtype=torch.int32, device=sel.device) + q_offset
    own_tile = pos // tile
    own_first = (pos // (split * tile)) * split
    earlier = own_first[:, None] + within[: split - 1]
    earlier = torch.where(earlier < own_tile[:, None], earlier, -1).to(torch.int32)
    return torch.cat([chosen, earlier.expand(BH, Tq, split - 1)], dim=2).contiguous()


def backward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, saved: dict):
    """(dq, dk, dv) of the attention over the selected chunks (and the own chunk), plus the STE
    gate's (grad = ste). The attention's part on the tiles the forward attended (`attention_key`)."""
    attend = attention_key(key)
    mod = load(attend)
    name = attend.slug()
    B, T, H, Dk = q.shape
    K = selection(attend).k
    n_chunks = triton_cdiv(T, chunk_size(selection(attend)))
    do = do.contiguous()
    delta, _ = launch.delta(getattr(mod, f"{name}_bwd_delta"), do, o)
    if group_attention(attend):  # its attn_bwd keeps the Top-1 chunk tiles: the sweep timed the pair path
        cfg = launch.tuned("topk_chunk.bwd", launch.tiles(Dk, q.dtype, train=True))
        return _group_backward(attend, q, k, v, do, delta, saved, cfg)
    cfg = launch.tuned("topk_chunk.bwd", launch.topk_tiles(Dk, q.dtype, train=True))
    local = selection(attend).local
    dq_own = torch.empty_like(q) if local else q.new_empty(0)  # each own chunk's program writes its rows
    # every pair with a chosen chunk is written; `dq_sum` skips the empty slots (sel = -1)
    dq_pairs = torch.empty(B * H, T * K, Dk, dtype=torch.float32, device=q.device)
    dk, dv = torch.empty_like(k), torch.empty_like(v)  # each key chunk's program writes its rows
    ste = selection(key).grad == "ste"
    # STE: the gate's dk first (float32), which attn_bwd adds to its own before its one store
    gate = _gate(key, q, k, delta, saved) if ste else None  # (dq's part, dk's part)
    getattr(mod, f"{name}_attn_bwd")[(B * k.shape[2], n_chunks)](  # per key/value head
        q, k, v, do, saved["lse"], delta, saved["perm"], saved["starts"], dq_own, dq_pairs,
        *(() if gate is None else (gate[1],)), dk, dv, *launch.strides(q, k, v, do), T, H, n_chunks,
        BLOCK_M=block_m(attend, cfg), PREC=launch.precision(q.dtype), **launch.launch_opts(cfg))
    extra = gate[0] if gate is not None else None  # float32 parts with q's strides
    if selection(attend).sink:
        sunk = _sinks(attend, mod, q, k, v, do, delta, saved, dk, dv, cfg)
        extra = sunk if extra is None else extra + sunk
    dq = torch.empty_like(q)  # q is contiguous (top1.py): the layout the op's fake implementation promises
    bm = block_m(attend, cfg)
    getattr(mod, f"{name}_dq_sum")[(triton_cdiv(T, bm), B * H)](
        dq_pairs, saved["sel"], *((dq_own,) if local else ()), dq if extra is None else extra, dq,
        *launch.strides(dq), T, H, HAS_ADD=extra is not None, BLOCK_M=bm)
    return dq, dk, dv


def _group_backward(attend: KernelKey, q: Tensor, k: Tensor, v: Tensor, do: Tensor, delta: Tensor, saved: dict,
                    cfg: dict) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) when the attention ran per (query, group): dq per query and group
    (`group_dq`), dk and dv per key chunk over its own queries and those whose group chose it
    (`attn_bwd`, one pair list per group: its heads' rows of sel are equal)."""
    mod = load(attend)
    name = attend.slug()
    B, T, H, Dk = q.shape
    HK = k.shape[2]
    K = selection(attend).k
    n_chunks = triton_cdiv(T, chunk_size(selection(attend)))
    prec = launch.precision(q.dtype)
    dq = torch.empty_like(q)
    getattr(mod, f"{name}_group_dq")[(T, B * HK)](
        q, k, v, do, saved["lse"], delta, saved["sel"], dq, *launch.strides(q, k, v, do, dq), T, T, 0, H,
        PREC=prec, **launch.launch_opts(_group_tiles(Dk)))
    first = saved["sel"].view(B, HK, H // HK, T * K)[:, :, 0].reshape(B * HK, T * K)
    perm, starts = launch.bucket(first, n_chunks)
    dk, dv = torch.empty_like(k), torch.empty_like(v)  # each key chunk's program writes its rows
    getattr(mod, f"{name}_attn_bwd")[(B * HK, n_chunks)](
        q, k, v, do, saved["lse"], delta, perm, starts, dk, dv, *launch.strides(q, k, v, do), T, H, n_chunks,
        BLOCK_M=block_m(attend, cfg), PREC=prec, **launch.launch_opts(cfg))
    return dq, dk, dv


def _sinks(attend: KernelKey, mod, q: Tensor, k: Tensor, v: Tensor, do: Tensor, delta: Tensor, saved: dict,
           dk: Tensor, dv: Tensor, cfg: dict) -> Tensor:
    """The sink tokens' share of the gradient: adds the sink keys' dk, dv into `dk`, `dv` (the
    query blocks' parts, summed over the blocks and a key head's query heads) and returns the
    queries' dq part (float32, q's strides)."""
    B, T, H, Dk = q.shape
    HK, Dv = k.shape[2], v.shape[-1]
    sink = selection(attend).sink
    block = sink_tile(selection(attend))  # the template's SINK_BLOCK
    bm = block_m(attend, cfg)
    n_blocks = triton_cdiv(T, bm)
    dqs = torch.empty_like(q, dtype=torch.float32)  # q's strides (the kernel writes with them); every row written
    dks = torch.empty(B, H, n_blocks, block, Dk, dtype=torch.float32, device=q.device)
    dvs = torch.empty(B, H, n_blocks, block, Dv, dtype=torch.float32, device=q.device)
    getattr(mod, f"{attend.slug()}_sink_bwd")[(n_blocks, B * H)](
        q, k, v, do, saved["lse"], delta, saved["sel"], dqs, dks, dvs, *launch.strides(q, k, v, do), T, H,
        BLOCK_M=bm, PREC=launch.precision(q.dtype), **launch.launch_opts(cfg))
    n = min(sink, T)
    for grad, part in ((dk, dks), (dv, dvs)):  # (B, H, blocks, block, D) -> (B, n, HK, D)
        part = part.view(B, HK, H // HK, n_blocks, block, -1).sum((2, 3))[:, :, :n].transpose(1, 2)
        grad[:, :n] = (grad[:, :n].float() + part).to(grad.dtype)
    return dqs


def _gate(key: KernelKey, q: Tensor, k: Tensor, delta: Tensor, saved: dict) -> tuple[Tensor, Tensor]:
    """The STE gate's gradient (dq's part, dk's part), float32, with q's and k's strides."""
    mod = load(key)
    name = key.slug()
    B, T, H, Dk = q.shape
    C = chunk_size(selection(key))
    cfg = launch.tuned("topk_chunk.gate", launch.tiles(Dk, q.dtype, train=True))
    bm = block_m(key, cfg)
    common = dict(PREC=launch.precision(q.dtype), **launch.launch_opts(cfg))
    stats = (saved["kbar"], saved["sel"], saved["lsec"], saved["gate"], delta)
    dqg = torch.empty_like(q, dtype=torch.float32)  # q's strides (the kernel writes with them); every row written
    getattr(mod, f"{name}_gate_dq")[(B * H, triton_cdiv(T, bm))](
        q, k, *stats, dqg, *launch.strides(q, k, saved["kbar"]), T, H, BLOCK_M=bm, BLOCK_C=_block_c(), **common)
    dkg = torch.empty_like(k, dtype=torch.float32)  # every key chunk's program writes its rows
    getattr(mod, f"{name}_gate_dk")[(B * k.shape[2], triton_cdiv(T, C))](  # per key/value head
        q, k, *stats, dkg, *launch.strides(q, k, saved["kbar"]), T, H, T // C, BLOCK_M=bm, **common)
    return dqg, dkg


def decode(key: KernelKey, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """(B, 1, H, Dv): the newest query (position L - 1) against the cache k, v (B, L, H / G, *),
    G = shared_kv_group(key): the forward's kernels with one query row."""
    with torch.no_grad():
        return forward(key, q, k, v, q_offset=k.shape[1] - 1)[0]
