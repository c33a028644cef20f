"""Top-k chunk selection (MoBA, NSA's selected branch) vs SDPA dense causal (cuDNN), with the
selection counted: FlexAttention with the same selection as a block mask, fla's `parallel_nsa`,
seqdsl's reference; a generated top-k kernel is one more column when the Triton table admits k > 1.

    python benchmarks/bench_topk.py [--cases moba_k3_c128,moba_k8_c64,nsa_k16_c64]
                                    [--lengths 8192,32768,65536,131072] [--dims 64,128]
                                    [--tokens 131072] [--check] [--budget-s 480] [--out benchmarks/results]
    python benchmarks/bench_topk.py --cases moba_k3_c128 --check     # one run per table (a GPU round)
    python benchmarks/bench_topk.py --smoke --check    # tiny shapes on the CPU (the numbers mean nothing)

Cases (the semantics of seqdsl/reference/top1.py: `topk_chunk_ref`, score = mean unless a case says lse, ties aside):
    moba_k3_c128  MoBA   top(3, over=chunk(128), score=mean, local=true)
    moba_k8_c64   MoBA   top(8, over=chunk(64), score=mean, local=true)
    moba_sink4_k3_c128, sink100_k3_c64   top(3, over=chunk(C), score=mean, sink=n): the first n tokens
                  attended besides the chunks, each key once (Flex: the tiles holding a sink are
                  partial for every query block, the mask_mod adds kv < n)
    lse_k4_c64    top(4, over=chunk(64), score=lse): chunks ranked by tau * logsumexp of their
                  keys' scores / tau (specs/topk_chunk_lse.seq's selection, without the gradient)
    nsa_k16_c64   NSA    top(16, over=chunk(64), score=mean)   (local = true, the language's default, kept:
                         NSA's selected branch always attends its local blocks besides the selected)
    nsa_shared_k16_c64   the same with the chunks chosen per key/value group (share = group, NSA's
                         own rule: specs/nsa_selected.seq), as fla's parallel_nsa attends them (no Flex
                         column: its block mask is built per query head here)
A query of chunk c_i picks the k best *earlier, complete* chunks by q . mean(keys of the chunk)
and attends their keys plus (local) the causal part of its own chunk; fewer than k earlier
chunks: all of them. (local = false is implemented and checked too: the own chunk is then a
candidate, scored on its keys j <= i.)

Shapes: inputs (B, T, H, D), bf16 on CUDA (float32 on the CPU), B * T = --tokens for every T.
MoBA cases: H = 768 / D query and key heads (the 110m preset's width; 2 with --smoke). NSA case:
a GQA shape fla's parallel_nsa supports (query heads per key head a power of two >= 16):
--nsa-heads 16:1 (HQ:HKV) by default; every column of that table runs those 16 query heads.

Columns, per (case, T, D, pass); pass = fwd (no grad) or fwd+bwd (backward of a random dO):
    sdpa_cudnn    F.scaled_dot_product_attention(is_causal=True) under SDPBackend.CUDNN_ATTENTION:
                  the BASELINE of every ratio (GQA: enable_gqa=True, else k/v expanded inside the
                  timed call, recorded as `gqa`). On the CPU: the default backend, labelled so.
    sdpa_flash    the same under SDPBackend.FLASH_ATTENTION (FA2 in PyTorch; CUDA only).
    flex          torch.compile(flex_attention) with a BlockMask built from the selection: the
                  selection (mean keys, scores, top-k, in PyTorch, float32) and the block mask
                  (BlockMask.from_kv_blocks: per 128 x 128 tile partial / full from the selected
                  chunks; a mask_mod for the per-query selection inside partial tiles) are built
                  inside every timed call ("selection counted"). On the CPU: eager flex_attention
                  (no torch.compile), forward only (FlexAttention has no CPU backward).
    fla_nsa       fla.ops.nsa.parallel_nsa(block_indices=own chunk + the k selected, padded with
                  -1 to a power of two, block_counts per query), NSA case only. fla takes ONE
                  selection per key head, shared by its query heads (NSA's design): here the
                  group's summed mean-key score, computed and counted the same way. Its attended
                  pairs equal seqdsl's; its selection is per key head instead of per query head.
    reference     seqdsl.reference.top1.topk_chunk_ref (grad = ste, the spec's), O(T^2) memory:
                  skipped with the reason when B * H * T^2 > --ref-max-elems.
    generated     seqdsl's generated top-k chunk kernels (codegen/templates/topk_chunk.py.jinja) for
                  the case with grad = none (no gradient through the selection, as MoBA and NSA
                  train; the other columns' selection carries none either), grouped key/value heads
                  read in place; the selection is inside the kernels, counted.
Every cell is ms and the ratio sdpa_cudnn ms / column ms (higher = faster than dense) of the same
run, or the reason it did not run (footnoted in the table, whole in the JSON). Never a blank.

Useful FLOPs per (batch, query head), D = Dk = Dv, pairs = attended (query, key) pairs:
    dense causal: forward 4 D T (T + 1) / 2, forward+backward 3.5x (flash-attention's convention)
    selection columns: forward 4 D pairs + 2 D T (T / C) (scores against mean keys), fwd+bwd
    3.5 x 4 D pairs + the selection. pairs (local = true) = sum_i min(k, c_i) C + (i mod C) + 1,
    exact; local = false: its upper bound.

--check (run FIRST; exit status 1 when any check fails): per case, at a T with 2k + 4 chunks
(k of them well inside the candidates), B = 1, selection in float64:
    flex        Flex output (CUDA: and dq, dk, dv) vs topk_chunk_ref(grad="none") in float64,
                norm-relative; float64 inputs on the CPU, float32 on CUDA. CPU: both mask
                encodings and local = false too; CUDA: the timed encoding and cases only (each
                compiles its own kernels).
    blocks      the element mask the BlockMask encodes (partial tiles through mask_mod, full tiles
                whole) used in a float64 masked softmax vs the same reference: eager
                flex_attention ignores the tile lists, the compiled kernel reads only them.
    fla         parallel_nsa vs a float64 masked softmax over the same (shared) selection: on CUDA,
                or on the CPU under TRITON_INTERPRET=1 (the interpreter has no benchmarker, so
                fla's autotuner takes its first config there) at a small NSA-like shape.
Writes JSON (device, date, versions, rows, checks, the published comparison) and a markdown
table to --out: bench_topk_<device>_<date>[_<cases>][_<suffix>].{json,md}.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kernel_bench import compiled_flex, results_stem, write_results  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    label: str
    k: int
    chunk: int
    local: bool
    gqa: bool  # the NSA table: a GQA shape, fla's column
    spec: str
    element: bool = False  # top-k keys (chunk 1): no block structure, no Flex or fla column
    grad: str = "none"  # "ste": element selection trained through the surrogate (a dense pass)
    score: str = "mean"  # chunk score: "mean" (MoBA, NSA) or "lse" (every key of a chunk scored)
    sink: int = 0  # sink tokens attended besides the chunks (top(..., sink=n))
    share: str = "head"  # "group": the query heads of a key/value head choose together (NSA)


CASES = {c.name: c for c in (
    Case("moba_k3_c128", "MoBA, k = 3 of 128-token chunks", 3, 128, True, False,
         "top(3, over=chunk(128), score=mean, local=true)"),
    Case("moba_k8_c64", "MoBA, k = 8 of 64-token chunks", 8, 64, True, False,
         "top(8, over=chunk(64), score=mean, local=true)"),
    Case("moba_k3_c512", "MoBA, k = 3 of 512-token chunks (MoBA's 8K setting; the 110m preset at 8K)", 3, 512,
         True, False, "top(3, over=chunk(512), score=mean, local=true)"),
    Case("moba_sink4_k3_c128", "MoBA with 4 sink tokens, k = 3 of 128-token chunks", 3, 128, True, False,
         "top(3, over=chunk(128), score=mean, sink=4)", sink=4),
    Case("sink100_k3_c64", "MoBA-like with 100 sink tokens, k = 3 of 64-token chunks (sinks over two chunks)",
         3, 64, True, False, "top(3, over=chunk(64), score=mean, sink=100)", sink=100),
    Case("lse_k4_c64", "top-k chunks by lse, k = 4 of 64-token chunks", 4, 64, True, False,
         "top(4, over=chunk(64), score=lse, grad=none)", score="lse"),
    Case("nsa_k16_c64", "NSA selected branch, k = 16 of 64-token chunks", 16, 64, True, True,
         "top(16, over=chunk(64), score=mean)"),
    Case("nsa_shared_k16_c64", "NSA selected branch, k = 16 of 64-token chunks chosen per key/value group",
         16, 64, True, True, "top(16, over=chunk(64), score=mean, grad=none, share=group)", share="group"),
    Case("element_k16", "top-k element, k = 16 keys", 16, 1, True, False, "top(16, grad=none)", element=True),
    Case("element_k64", "top-k element, k = 64 keys (DeepSeek sparse attention's shape, small k)", 64, 1, True,
         False, "top(64, grad=none)", element=True),
    Case("element_k16_ste", "top-k element, k = 16 keys, with the STE (q and k trained through a softmax over "
         "every visible key)", 16, 1, True, False, "top(16)", element=True, grad="ste"),
)}

# Quoted, not measured: printed under the MoBA tables, labelled as such.
PUBLISHED = [dict(
    what="FlashMoBA vs FlashAttention-2, forward+backward (speedup, higher = faster)",
    source="FlashMoBA paper, as quoted in the issue; its own shapes and GPU, not re-measured or re-checked here",
    measured=False, ratios={"8192": 1.1, "32768": 3.3, "65536": 5.9})]

COLUMNS = ("sdpa_cudnn", "sdpa_flash", "flex", "fla_nsa", "reference", "generated")
LABELS = {"sdpa_cudnn": "SDPA cuDNN (baseline)", "sdpa_flash": "SDPA flash", "flex": "Flex + selection",
          "fla_nsa": "fla parallel_nsa + selection", "reference": "seqdsl reference",
          "generated": "seqdsl generated"}
BASELINE = "sdpa_cudnn"


class Skip(Exception):
    """A column (or one pass of it) that cannot run here; the message is the reason printed."""


def _json_object(text: str) -> dict:
    """--flex-kernel-options: a JSON object (empty: none)."""
    value = json.loads(text) if text.strip() else {}
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    p.add_argument("--lengths", default="8192,32768,65536,131072")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--tokens", type=int, default=131072, help="B * T for every T")
    p.add_argument("--nsa-heads", default="16:1", help="HQ:HKV of the NSA table (fla: HQ/HKV a power of 2 >= 16)")
    p.add_argument("--columns", default=",".join(COLUMNS), help="a subset of " + ", ".join(COLUMNS))
    p.add_argument("--flex-max-t", type=int, default=131072, help="longest T FlexAttention runs at")
    p.add_argument("--flex-block", type=int, default=128, help="BlockMask tile (query and key)")
    p.add_argument("--flex-kernel-options", default="", type=_json_object,
                   help='JSON passed to flex_attention as kernel_options, e.g. \'{"num_stages": 2}\' or '
                        '\'{"BLOCK_M": 64, "BLOCK_N": 64}\' (its defaults at D 64 asked more shared memory than '
                        'an H200 has, 2026-11-27)')
    p.add_argument("--flex-encoding", default="bits", choices=("bits", "indices"),
                   help="the mask_mod's view of the selection: a chunk bitset per query, or the k indices")
    p.add_argument("--ref-max-elems", type=float, default=2.0 ** 30,
                   help="largest B * H * T^2 the O(T^2) reference is timed at")
    p.add_argument("--check", action="store_true", help="correctness against the float64 reference (first)")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    p.add_argument("--budget-s", type=float, default=480.0, help="skip what starts after this many seconds")
    p.add_argument("--suffix", default="", help="appended to the output files' stem")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------
# the selection, in PyTorch (what the Flex and fla columns time; what the check proves)
# ---------------------------------------------------------------------------------------------

def select_chunks(q, k, *, chunk: int, k_top: int, local: bool, per_kv_head: bool = False,
                  dtype=None, max_elems: int = 2 ** 28, score: str = "mean", scale: float = 1.0):
    """(B, Hs, T, k') int64 chunk indices each query attends besides its own chunk (local), -1
    where there are fewer candidates; k' = min(k_top, T / chunk). Hs = HQ (seqdsl: per query
    head), or HKV with per_kv_head (NSA/fla: one selection per key head, the group's summed score).

    q (B, T, HQ, D), k (B, T, HKV, D), T a multiple of chunk. Score of chunk c for query i:
    q_i . mean of the chunk's keys (the reference's "mean" = the mean of s_ij, by linearity, up
    to the positive scale); candidates: c < c_i (local) or c <= c_i, the own chunk scored on its
    keys j <= i (not local). score = "lse": logsumexp over the chunk's visible keys of
    scale * q_i . k_j (temperature 1; the ranking depends on the scale), from every q . k.
    Computed in slices of queries (at most max_elems scores at a time)."""
    import torch

    B, T, HQ, D = q.shape
    HKV = k.shape[2]
    G = HQ // HKV
    if T % chunk:
        raise ValueError(f"T = {T} is not a multiple of the chunk {chunk}")
    dt = dtype or (torch.float64 if q.dtype == torch.float64 else torch.float32)
    n = T // chunk
    kc = k.to(dt).view(B, n, chunk, HKV, D)
    kbar = kc.mean(2)  # (B, n, HKV, D)
    qq = q.to(dt)
    if per_kv_head:
        qq, heads = qq.view(B, T, HKV, G, D).sum(3), HKV
    else:
        kbar, heads = kbar.repeat_interleave(G, dim=2), HQ
    if not local:  # the own chunk's mean over its keys j <= i: a running mean inside the chunk
        counts = torch.arange(1, chunk + 1, device=k.device, dtype=dt)[None, None, :, None, None]
        prefix = (kc.cumsum(2) / counts).view(B, T, HKV, D)
        if not per_kv_head:
            prefix = prefix.repeat_interleave(G, dim=2)
    if score == "lse":
        if per_kv_head:
            raise ValueError("lse scores per key head (a group's summed score) are not defined here")
        keys = k.to(dt).repeat_interleave(G, dim=2)  # (B, T, HQ, D)
    kk = min(k_top, n)
    out = torch.full((B, heads, T, kk), -1, dtype=torch.long, device=q.device)
    pos_chunk = torch.arange(T, device=q.device) // chunk
    ids = torch.arange(n, device=q.device)
    rows = max(1, int(max_elems) // max(1, B * heads * (T if score == "lse" else n)))
    for t0 in range(0, T, rows):
        t1 = min(T, t0 + rows)
        ci = pos_chunk[t0:t1]
        if score == "lse":  # every key: (B, heads, rows, T), the own chunk's later keys hidden
            raw = torch.einsum("bthd,bshd->bhts", qq[:, t0:t1], keys) * scale
            later = torch.arange(T, device=q.device)[None, :] > torch.arange(t0, t1, device=q.device)[:, None]
            s = raw.masked_fill(later, float("-inf")).view(B, heads, t1 - t0, n, chunk).logsumexp(-1)
        else:
            s = torch.einsum("bthd,bchd->bhtc", qq[:, t0:t1], kbar)
        if local:
            cand = ids[None, :] < ci[:, None]
        else:
            cand = ids[None, :] <= ci[:, None]
            if score != "lse":  # the own chunk's mean over its visible keys (lse: already masked)
                own = torch.einsum("bthd,bthd->bht", qq[:, t0:t1], prefix[:, t0:t1])
                s = s.scatter(-1, ci[None, None, :, None].expand(B, heads, t1 - t0, 1), own[..., None])
        s = s.masked_fill(~cand, float("-inf"))
        val, ind = s.topk(kk, dim=-1)
        out[:, :, t0:t1] = torch.where(val > float("-inf"), ind, -1)
    return out


def block_tiles(idx, *, T: int, chunk: int, local: bool, block: int, sink: int = 0):
    """(partial, full) bool (B, H, T / block, T / block): the BlockMask's tiles for the selection
    idx (B, H, T, k). A tile is full when every query of its row block attends every key of it
    (all its chunks picked by all `block` queries, the tile wholly before the queries); partial
    when some query attends some key of it (the mask_mod decides inside): with `sink` tokens, every
    tile holding one, at or before the queries' tile, too."""
    import torch

    B, H, _, K = idx.shape
    n, nb = T // chunk, T // block
    if T % block or not (chunk % block == 0 or block % chunk == 0):
        raise ValueError(f"T = {T}, chunk {chunk} and block {block}: tiles must divide both")
    t = torch.arange(T, device=idx.device)
    qb = (t // block)[None, None, :, None]
    valid = idx >= 0
    cnt = torch.zeros(B, H, nb * n, dtype=torch.int32, device=idx.device)
    cnt.scatter_add_(-1, (qb * n + idx.clamp(min=0)).reshape(B, H, -1), valid.reshape(B, H, -1).int())
    if local:  # the own chunk (never among idx when local)
        own = ((t // block) * n + t // chunk).expand(B, H, T)
        cnt.scatter_add_(-1, own, torch.ones_like(own, dtype=torch.int32))
    cnt = cnt.view(B, H, nb, n)
    if chunk >= block:
        per = cnt.repeat_interleave(chunk // block, dim=-1)
        touched, whole = per > 0, per == block
    else:
        per = cnt.view(B, H, nb, nb, block // chunk)
        touched, whole = (per > 0).any(-1), (per == block).all(-1)
    before = torch.arange(nb, device=idx.device)[None, :] < torch.arange(nb, device=idx.device)[:, None]
    full = whole & before
    if sink:
        tiles = torch.arange(nb, device=idx.device)
        touched = touched | ((tiles[None, :] < -(-sink // block)) & (tiles[None, :] <= tiles[:, None]))
    return touched & ~full, full


def _tile_lists(m):
    import torch

    num = m.sum(-1, dtype=torch.int32)
    ind = torch.argsort(m.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
    return num, ind


class FlexSelected:
    """flex_attention over the selection's BlockMask for one shape. The selection buffer the
    mask_mod reads is allocated once (one mask_mod object, so the compiled kernel is reused) and
    refilled by every call; selection + tiles + BlockMask are built inside the call (counted)."""

    def __init__(self, case: Case, B: int, HQ: int, HKV: int, T: int, device, *, block: int, encoding: str,
                 compiled: bool, score_dtype=None, kernel_options: dict | None = None):
        import torch

        self.case, self.T, self.block, self.encoding = case, T, block, encoding
        self.kernel_options = kernel_options or None
        self.gqa = HQ != HKV
        self.score_dtype = score_dtype
        C, n, local, sink = case.chunk, T // case.chunk, case.local, case.sink
        if encoding == "bits":  # bit c % 32 of word c // 32: query attends chunk c (besides its own)
            self.buf = torch.zeros(B, HQ, T, -(-n // 32), dtype=torch.int32, device=device)
            words = self.buf

            def mask_mod(b, h, qi, kv):
                c = kv // C
                hit = ((words[b, h, qi, c // 32] >> (c % 32)) & 1) == 1
                if local:
                    hit = hit | (c == qi // C)
                return (hit | (kv < sink)) & (kv <= qi)
        elif encoding == "indices":  # the k chunk indices, -1 where none
            K = min(case.k, n)
            self.buf = torch.full((B, HQ, T, K), -1, dtype=torch.int32, device=device)
            ind = self.buf

            def mask_mod(b, h, qi, kv):
                c = kv // C
                hit = (c == qi // C) if local else (ind[b, h, qi, 0] == c)
                for j in range(0 if local else 1, K):
                    hit = hit | (ind[b, h, qi, j] == c)
                return (hit | (kv < sink)) & (kv <= qi)
        else:
            raise ValueError(encoding)
        self.mask_mod = mask_mod
        from torch.nn.attention.flex_attention import flex_attention

        self.flex = compiled_flex() if compiled else flex_attention

    def block_mask(self, q, k, scale: float):
        import torch
        from torch.nn.attention.flex_attention import BlockMask

        case = self.case
        with torch.no_grad():
            idx = select_chunks(q, k, chunk=case.chunk, k_top=case.k, local=case.local, dtype=self.score_dtype,
                                score=case.score, scale=scale)
            if self.encoding == "bits":
                self.buf.zero_()
                pos = idx.clamp(min=0) % 32  # bit 31 as -2^31: every value in int32's range, no wrap
                bit = torch.where(pos == 31, -(2 ** 31), torch.ones_like(idx) << pos)
                bit = torch.where(idx >= 0, bit, 0).to(torch.int32)
                self.buf.scatter_add_(-1, idx.clamp(min=0) // 32, bit)  # distinct bits: add = or
            else:
                self.buf.copy_(idx)
            partial, full = block_tiles(idx, T=self.T, chunk=case.chunk, local=case.local, block=self.block,
                                        sink=case.sink)
            return BlockMask.from_kv_blocks(*_tile_lists(partial), *_tile_lists(full), BLOCK_SIZE=self.block,
                                            mask_mod=self.mask_mod, seq_lengths=(self.T, self.T))

    def __call__(self, q, k, v, scale):
        """(B, T, HQ, D) from q (B, T, HQ, D), k, v (B, T, HKV, D)."""
        bm = self.block_mask(q.detach(), k.detach(), scale)
        out = self.flex(*(t.transpose(1, 2) for t in (q, k, v)), block_mask=bm, scale=scale, enable_gqa=self.gqa,
                        kernel_options=self.kernel_options)
        return out.transpose(1, 2)


def fla_indices(q, k, case: Case, *, dtype=None):
    """(block_indices (B, T, HKV, S) int64, block_counts (B, T, HKV) int64) for parallel_nsa:
    slot 0 the own chunk (local), then the selected chunks (one selection per key head), -1
    padding to S, a power of two (fla's CSR kernel tiles S)."""
    import torch

    idx = select_chunks(q, k, chunk=case.chunk, k_top=case.k, local=case.local, per_kv_head=True, dtype=dtype)
    B, H, T, K = idx.shape
    parts = [idx]
    if case.local:
        parts.insert(0, (torch.arange(T, device=q.device) // case.chunk).view(1, 1, T, 1).expand(B, H, T, 1))
    sel = torch.cat(parts, -1)
    S = 1 << (sel.shape[-1] - 1).bit_length()
    # the valid entries first (stable), -1 after; counts = how many are valid
    order = torch.argsort((sel < 0).to(torch.int8), dim=-1, stable=True)
    sel = sel.gather(-1, order)
    if S > sel.shape[-1]:
        sel = torch.cat([sel, sel.new_full((B, H, T, S - sel.shape[-1]), -1)], -1)
    counts = (sel >= 0).sum(-1)
    return sel.permute(0, 2, 1, 3).contiguous(), counts.permute(0, 2, 1).contiguous()


def fla_support(HQ: int, HKV: int) -> str:
    """'' when parallel_nsa takes this head layout, else why not."""
    G = HQ // HKV if HKV and HQ % HKV == 0 else 0
    if G < 16 or G & (G - 1):
        return (f"{HQ} query heads per {HKV} key heads (group {G}): fla's parallel_nsa needs a group that is "
                "a power of two >= 16 (a GQA shape, the NSA table's --nsa-heads)")
    return ""


@contextlib.contextmanager
def _interpreter_autotune():
    """Under TRITON_INTERPRET=1 there is no benchmarker: fla's autotuned kernels would fail to
    time their configs. Take the first config instead, for the duration (CPU check only)."""
    import triton.runtime.autotuner as autotuner

    real = autotuner.Autotuner._bench
    autotuner.Autotuner._bench = lambda self, *args, config=None, **kwargs: [1.0, 1.0, 1.0]
    try:
        yield
    finally:
        autotuner.Autotuner._bench = real


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------

def heads(case: Case, dim: int, args) -> tuple[int, int]:
    if args.smoke:
        return 2, 2
    if case.gqa:
        hq, hkv = (int(x) for x in args.nsa_heads.split(":"))
        return hq, hkv
    return max(1, 768 // dim), max(1, 768 // dim)


def attended_pairs(case: Case, T: int) -> float:
    """Attended (query, key) pairs per (batch, head), for T a multiple of the chunk (exact with
    `local`, an upper bound without); element: query i attends min(k, i + 1) keys."""
    C, k = case.chunk, case.k
    if case.element:
        return float(sum(min(k, i + 1) for i in range(min(T, k))) + max(0, T - k) * k)
    total = 0
    for c in range(T // C):
        own = C * (C + 1) // 2
        if case.local:
            total += C * min(k, c) * C + own
        else:  # upper bound: the own chunk among the k when there are at most k candidates
            total += C * min(k, c) * C + (own if k > c else 0)
    if case.sink:  # sinks past the (earliest, as counted) chosen chunks, before an attended own chunk
        for i in range(T):
            c = i // C
            own_attended = case.local or k > c
            total += max(0, min(case.sink, i + 1, c * C if own_attended else i + 1) - min(k, c) * C)
    return float(total)


def useful_flops(column: str, case: Case, B: int, H: int, T: int, D: int) -> tuple[float, float]:
    bh = B * H
    if column.startswith("sdpa"):
        f = 4 * D * T * (T + 1) / 2
        return bh * f, bh * 3.5 * f
    pairs = attended_pairs(case, T)
    # the selection's scores: every visible key (element, lse chunk scores) or one per chunk (mean keys)
    sel = 2 * D * T * (T + 1) / 2 if case.element or case.score == "lse" else 2 * D * T * (T / case.chunk)
    dense = 4 * D * T * (T + 1) / 2 if case.grad == "ste" else 0.0  # the STE's surrogate: a dense attention
    return bh * (4 * D * pairs + sel + dense), bh * (3.5 * 4 * D * pairs + sel + 3.5 * dense)


def generated_key(case: Case, dim: int, HQ: int, HKV: int):
    """The case's kernel key: no gradient through the selection (what the generated top-k kernels
    run, as MoBA and NSA train; the case's `grad` for element selection), HQ query heads on HKV
    key/value heads read in place."""
    from tests.kernels.keys import variant

    if case.element:
        key = variant("top1_element", dk=dim, dv=dim, k=case.k, grad=case.grad)
        return dataclasses.replace(key, heads=HQ, kv_groups=HKV)
    key = variant("top1_chunk_approx", dk=dim, dv=dim, k=case.k, chunk=case.chunk, local=case.local, grad="none",
                  score=case.score, sink=case.sink, share=case.share)
    return dataclasses.replace(key, heads=HQ, kv_groups=HKV)


def column_runners(column: str, case: Case, q, k, v, scale: float, args, device):
    """{pass: callable or Skip} for one column at one shape; q (B, T, HQ, D), k, v (B, T, HKV, D)
    are leaves the fwd+bwd callables differentiate. Raises Skip when the whole column cannot run."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, T, HQ, D = q.shape
    HKV = k.shape[2]
    G = HQ // HKV
    cuda = device.type == "cuda"

    def expand(t):
        return t.repeat_interleave(G, dim=2) if G > 1 else t

    if column.startswith("sdpa"):
        if column == "sdpa_flash" and not cuda:
            raise Skip("SDPA's flash backend: CUDA only")
        backend = SDPBackend.CUDNN_ATTENTION if column == "sdpa_cudnn" else SDPBackend.FLASH_ATTENTION
        mode = {"gqa": "native" if G > 1 else "none"}

        def call(q, k, v):
            kk, vv = (expand(k), expand(v)) if mode["gqa"] == "expanded" else (k, v)
            ctx = sdpa_kernel(backend) if cuda else contextlib.nullcontext()
            with ctx:
                return F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, kk, vv)), is_causal=True,
                                                      scale=scale, enable_gqa=mode["gqa"] == "native").transpose(1, 2)
        if G > 1:
            try:
                with torch.no_grad():
                    call(q[:, :128], k[:, :128], v[:, :128])
            except Exception:  # this backend has no GQA here: expand k, v inside the timed call
                mode["gqa"] = "expanded"
        return call, dict(gqa=mode["gqa"], backend="cpu default" if not cuda else column[5:])
    if column == "flex":
        if case.element:
            raise Skip("top-k keys per query: no block structure for a BlockMask (every tile partial)")
        if case.share == "group":
            raise Skip("chunks chosen per key/value group: the Flex column's block mask is built per query head")
        if T > args.flex_max_t:
            raise Skip(f"T > --flex-max-t {args.flex_max_t}")
        try:
            runner = FlexSelected(case, B, HQ, HKV, T, device, block=args.flex_block, encoding=args.flex_encoding,
                                  compiled=cuda, kernel_options=args.flex_kernel_options)
        except ImportError as err:
            raise Skip(f"FlexAttention unavailable: {err}") from err
        return (lambda q, k, v: runner(q, k, v, scale)), dict(encoding=args.flex_encoding, compiled=cuda,
                                                               kernel_options=args.flex_kernel_options)
    if column == "fla_nsa":
        if not case.gqa:
            raise Skip("fla's parallel_nsa: the NSA table only")
        why = fla_support(HQ, HKV)
        if why:
            raise Skip(why)
        if not cuda:
            raise Skip("fla's Triton kernels need a CUDA device here (the CPU runs them only in --check, "
                       "under the interpreter)")
        try:
            from fla.ops.nsa.parallel import parallel_nsa
        except Exception as err:
            raise Skip(f"fla does not import: {type(err).__name__}: {err}"[:200]) from err

        def nsa(q, k, v):
            with torch.no_grad():
                ind, cnt = fla_indices(q.detach(), k.detach(), case)
            return parallel_nsa(q, k, v, block_indices=ind, block_counts=cnt, block_size=case.chunk, scale=scale)
        return nsa, dict(selection="per key head (the group's summed mean-key score)")
    if column == "reference":
        elems = B * HQ * T * T
        if elems > args.ref_max_elems:
            raise Skip(f"O(T^2) reference: B * H * T^2 = {elems:.2g} score entries > --ref-max-elems "
                       f"{args.ref_max_elems:.2g}")
        from seqdsl.reference.top1 import topk_chunk_ref, topk_element_ref

        if case.element:
            return (lambda q, k, v: topk_element_ref(q, expand(k), expand(v), scale=scale, k_top=case.k,
                                                     grad=case.grad)), {}

        def ref(q, k, v):
            return topk_chunk_ref(q, expand(k), expand(v), chunk=case.chunk, scale=scale, k_top=case.k,
                                  score=case.score, local=case.local, grad="ste", sink=case.sink,
                                  group=HQ // HKV if case.share == "group" else 1)
        return ref, {}
    if column == "generated":
        try:
            from seqdsl.ir import support

            key = generated_key(case, D, HQ, HKV)
            verdict = support.triton(key)
        except Exception as err:  # the spec or key machinery is mid-edit: say so
            raise Skip(f"no kernel key: {type(err).__name__}: {err}"[:200]) from err
        if not verdict.ok:
            raise Skip(f"not generated: seqdsl.ir.support.triton says \"{verdict.reason}\"")
        if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise Skip("the generated kernels need a CUDA device (or TRITON_INTERPRET=1) here")
        from seqdsl.kernels import top1

        kernel = top1.bind(key)
        return kernel, dict(key=key.slug(), gqa="native" if G > 1 else "none")
    raise ValueError(column)


def time_column(fn, q, k, v, do, device) -> dict:
    """fwd_ms and fwdbwd_ms (and peak MiB on CUDA), or fwd_skip / fwdbwd_skip with the reason."""
    import torch
    from bench_top1 import bench, peak_mib

    row = {}
    try:
        with torch.no_grad():
            row["fwd_ms"] = bench(lambda: fn(q, k, v), device)
    except Exception as err:
        row["fwd_skip"] = _why(err)
        _free(device)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]

    def train():
        fn(*leaves).backward(do)
        for t in leaves:
            t.grad = None
    try:
        row["fwdbwd_ms"] = bench(train, device)
        row["peak_mib"] = peak_mib(train, device)
    except Exception as err:
        row["fwdbwd_skip"] = _why(err)
        _free(device)
    return row


def _why(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}"[:240]


def _free(device):
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure(args, device, cases, save=None) -> list[dict]:
    import torch

    columns = [c for c in args.columns.split(",") if c]
    lengths = [int(x) for x in args.lengths.split(",")]
    dims = [int(x) for x in args.dims.split(",")]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    start = time.perf_counter()
    rows = []
    for case in cases:
        for T in lengths:  # short lengths first, both dims: a spent budget skips the longest
            for dim in dims:
                HQ, HKV = heads(case, dim, args)
                B = max(1, args.tokens // T)
                base = dict(case=case.name, T=T, dim=dim, B=B, HQ=HQ, HKV=HKV)
                if time.perf_counter() - start > args.budget_s:
                    for column in columns:
                        rows.append(dict(base, column=column, skip=f"budget spent (--budget-s {args.budget_s:g})"))
                    print(f"budget spent: skipping {case.name} T={T} D={dim}", flush=True)
                    continue
                gen = torch.Generator(device=device).manual_seed(0)
                q = torch.randn(B, T, HQ, dim, device=device, dtype=dtype, generator=gen)
                k, v = (torch.randn(B, T, HKV, dim, device=device, dtype=dtype, generator=gen) for _ in range(2))
                do = torch.randn(B, T, HQ, dim, device=device, dtype=dtype, generator=gen)
                scale = dim ** -0.5
                for column in columns:
                    row = dict(base, column=column)
                    try:
                        fn, info = column_runners(column, case, q, k, v, scale, args, device)
                        row.update(info)
                        row.update(time_column(fn, q, k, v, do, device))
                        f, fb = useful_flops(column, case, B, HQ, T, dim)
                        if "fwd_ms" in row:
                            row["fwd_tflops"] = f / row["fwd_ms"] / 1e9
                        if "fwdbwd_ms" in row:
                            row["fwdbwd_tflops"] = fb / row["fwdbwd_ms"] / 1e9
                    except Skip as why:
                        row["skip"] = str(why)
                    except Exception as err:  # OOM, a backend missing: recorded, not hidden
                        row["skip"] = _why(err)
                        _free(device)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if save:
                        save(rows)
                del q, k, v, do
                _free(device)
    return rows


def ratios(rows: list[dict]) -> None:
    """Each row's sdpa_cudnn ms / its ms per pass, from the same run and shape (higher = faster)."""
    for row in rows:
        same = [r for r in rows if r["column"] == BASELINE and
                (r["case"], r["T"], r["dim"]) == (row["case"], row["T"], row["dim"])]
        for p in ("fwd", "fwdbwd"):
            if same and f"{p}_ms" in same[0] and f"{p}_ms" in row:
                row[f"{p}_x_sdpa"] = same[0][f"{p}_ms"] / row[f"{p}_ms"]


# ---------------------------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------------------------

def _rel(x, y) -> float:
    y64 = y.double()
    scale = y64.norm().item()
    diff = (x.double() - y64).norm().item()
    return diff / scale if scale > 0 else diff


def _masked_attention(q, k, v, mask, scale):
    """float64 softmax attention over mask (B, H, T, T); k, v expanded to q's heads."""
    import torch

    s = torch.einsum("bihd,bjhd->bhij", q.double(), k.double()) * scale
    w = torch.softmax(s.masked_fill(~mask, float("-inf")), -1)
    return torch.einsum("bhij,bjhd->bihd", w, v.double())


def encoded_mask(bm, mask_mod, B, H, T, device):
    """(B, H, T, T) bool: what the BlockMask's tile lists and mask_mod let through (partial tiles
    through the mask_mod, full tiles whole, all else masked): what the compiled kernel computes."""
    import torch
    from torch.nn.attention.flex_attention import create_mask

    block = bm.BLOCK_SIZE[0]
    nb = T // block

    def tiles(num, ind):
        dense = torch.zeros(B, H, nb, nb + 1, dtype=torch.bool, device=device)
        live = torch.arange(ind.shape[-1], device=device) < num[..., None].long()
        dense.scatter_(-1, torch.where(live, ind.long(), nb), live)
        return dense[..., :nb].repeat_interleave(block, -2).repeat_interleave(block, -1)

    inner = create_mask(mask_mod, B, H, T, T, device=device)
    out = tiles(bm.kv_num_blocks, bm.kv_indices) & inner
    if bm.full_kv_num_blocks is not None:
        out = out | tiles(bm.full_kv_num_blocks, bm.full_kv_indices)
    return out


def run_check(cases, device, args) -> list[dict]:
    """Per case: Flex (both encodings) and the BlockMask's encoded mask vs the reference; fla."""
    import torch

    from seqdsl.reference.top1 import topk_chunk_ref, topk_element_ref

    cuda = device.type == "cuda"
    dtype = torch.float32 if cuda else torch.float64
    tol = {torch.float32: 1e-3, torch.float64: 1e-9}[dtype]
    dim = 64 if cuda else 16
    rows = []
    # CUDA: the timed encoding and cases only (each compiles its kernels, tens of seconds); CPU:
    # both encodings, and local = false as well
    encodings = (args.flex_encoding,) if cuda else ("bits", "indices")
    checked = list(cases)
    if not cuda and not cases[0].element:
        checked.append(dataclasses.replace(cases[0], name=cases[0].name + "_nonlocal", local=False))
    for case in checked:
        n_chunks = 2 * case.k + 4
        T = -(-n_chunks * case.chunk // args.flex_block) * args.flex_block
        HQ, HKV = ((16, 1) if cuda else (4, 2)) if case.gqa else ((4, 4) if cuda else (2, 2))
        gen = torch.Generator().manual_seed(1)
        q = torch.randn(1, T, HQ, dim, generator=gen, dtype=torch.float64)
        k, v = (torch.randn(1, T, HKV, dim, generator=gen, dtype=torch.float64) for _ in range(2))
        do = torch.randn(1, T, HQ, dim, generator=gen, dtype=torch.float64)
        scale = dim ** -0.5
        G = HQ // HKV
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        kv = [t.repeat_interleave(G, 2) for t in leaves[1:]]
        if case.element:
            want = topk_element_ref(leaves[0], *kv, scale=scale, k_top=case.k, grad=case.grad)
        else:
            want = topk_chunk_ref(leaves[0], *kv, chunk=case.chunk, scale=scale, k_top=case.k, score=case.score,
                                  local=case.local, grad="none", sink=case.sink, group=G if case.share == "group" else 1)
        want_grads = torch.autograd.grad(want, leaves, do) if cuda else None
        qd, kd, vd, dod = (t.to(device=device, dtype=dtype) for t in (q, k, v, do))
        for encoding in () if case.element or case.share == "group" else encodings:  # no block mask to check
            t0 = time.perf_counter()
            row = dict(check="flex", case=case.name, local=case.local, encoding=encoding, T=T, HQ=HQ, HKV=HKV,
                       dim=dim, dtype=str(dtype).replace("torch.", ""), tol=tol)
            try:
                runner = FlexSelected(case, 1, HQ, HKV, T, device, block=args.flex_block, encoding=encoding,
                                      compiled=cuda, score_dtype=torch.float64)
                got_leaves = [t.detach().requires_grad_(cuda) for t in (qd, kd, vd)]
                got = runner(*got_leaves, scale)
                row["err_o"] = _rel(got.detach().cpu(), want.detach())
                if cuda:
                    grads = torch.autograd.grad(got, got_leaves, dod)
                    for name, g, w in zip(("dq", "dk", "dv"), grads, want_grads):
                        row[f"err_{name}"] = _rel(g.cpu(), w)
                bm = runner.block_mask(qd, kd, scale)
                mask = encoded_mask(bm, runner.mask_mod, 1, HQ, T, device).cpu()
                blocks = _masked_attention(q, k.repeat_interleave(G, 2), v.repeat_interleave(G, 2), mask, scale)
                row["err_blocks"] = _rel(blocks, want.detach())
                row["tiles_partial"] = int(bm.kv_num_blocks.sum())
                row["tiles_full"] = int(bm.full_kv_num_blocks.sum()) if bm.full_kv_num_blocks is not None else 0
                row["ok"] = all(v_ <= tol for k_, v_ in row.items() if k_.startswith("err_"))
            except Exception as err:
                row.update(ok=False, error=_why(err))
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print("check " + json.dumps(row), flush=True)
        if cuda:  # the generated kernels compiled for this GPU (the interpreter's are tests/kernels')
            rows.append(_check_generated(case, (qd, kd, vd, dod), want, want_grads, tol))
            print("check " + json.dumps(rows[-1]), flush=True)
        if case.gqa and case.share == "head":  # fla's own selection: checked once, whatever the case's
            rows.append(_check_fla(case, device))
            print("check " + json.dumps(rows[-1]), flush=True)
    return rows


def _check_generated(case: Case, inputs, want, want_grads, tol: float) -> dict:
    """The generated top-k kernels (float32, key/value heads in place) vs the float64 reference:
    output and dq, dk, dv."""
    import torch

    q, k, v, do = inputs
    row = dict(check="generated", case=case.name, local=case.local, T=q.shape[1], HQ=q.shape[2], HKV=k.shape[2],
               dim=q.shape[-1], dtype="float32", tol=tol)
    t0 = time.perf_counter()
    try:
        from seqdsl.kernels import top1

        key = generated_key(case, q.shape[-1], q.shape[2], k.shape[2])
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        got = top1.bind(key)(*leaves)
        row["err_o"] = _rel(got.detach().cpu(), want.detach())
        for name, g, w in zip(("dq", "dk", "dv"), torch.autograd.grad(got, leaves, do), want_grads):
            row[f"err_{name}"] = _rel(g.cpu(), w)
        row["ok"] = all(v_ <= tol for k_, v_ in row.items() if k_.startswith("err_"))
    except Exception as err:
        row.update(ok=False, error=_why(err))
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def _check_fla(case: Case, device) -> dict:
    """parallel_nsa vs a float64 masked softmax over the same per-key-head selection."""
    import torch

    cuda = device.type == "cuda"
    if cuda:
        B, HQ, HKV, dim, c = 1, 16, 1, 64, case
    else:  # the interpreter runs one program at a time: a small NSA-like shape
        B, HQ, HKV, dim, c = 1, 16, 1, 16, dataclasses.replace(case, k=3, chunk=32)
    T = (2 * c.k + 4) * c.chunk
    # tolerance: fla's float32 dots run in tf32 on CUDA (a wrong selection is off by O(1))
    row = dict(check="fla", case=case.name, k=c.k, chunk=c.chunk, local=c.local, T=T, HQ=HQ, HKV=HKV, dim=dim,
               dtype="float32", tol=1e-2 if cuda else 1e-5)
    if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        return dict(row, ok=None, skip="no CUDA device and TRITON_INTERPRET is not 1: fla's kernels cannot run")
    try:
        from fla.ops.nsa.parallel import parallel_nsa
    except Exception as err:
        return dict(row, ok=None, skip=f"fla does not import: {_why(err)}")
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(B, T, HQ, dim, generator=gen)
    k, v = (torch.randn(B, T, HKV, dim, generator=gen) for _ in range(2))
    do = torch.randn(B, T, HQ, dim, generator=gen)
    scale = dim ** -0.5
    G = HQ // HKV
    try:
        ind, cnt = fla_indices(q.double(), k.double(), c)
        # the mask those indices mean: query t (key head h) attends chunk ind[b, t, h, s], j <= t
        chunk_of = torch.arange(T) // c.chunk
        sel = torch.zeros(B, T, HKV, T // c.chunk + 1, dtype=torch.bool)
        sel.scatter_(-1, torch.where(ind >= 0, ind, T // c.chunk), True)
        mask = sel[..., :-1][..., chunk_of].permute(0, 2, 1, 3) & (torch.arange(T)[None, :] <= torch.arange(T)[:, None])
        mask = mask.repeat_interleave(G, 1)  # (B, HQ, T, T)
        leaves = [t.double().requires_grad_() for t in (q, k, v)]
        want = _masked_attention(leaves[0], *(t.repeat_interleave(G, 2) for t in leaves[1:]), mask, scale)
        want_grads = torch.autograd.grad(want, leaves, do.double())
        got_leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
        ctx = contextlib.nullcontext() if cuda else _interpreter_autotune()
        with ctx:
            got = parallel_nsa(*got_leaves, block_indices=ind.to(device), block_counts=cnt.to(device),
                               block_size=c.chunk, scale=scale)
            grads = torch.autograd.grad(got, got_leaves, do.to(device))
        row["err_o"] = _rel(got.detach().cpu(), want.detach())
        for name, g, w in zip(("dq", "dk", "dv"), grads, want_grads):
            row[f"err_{name}"] = _rel(g.cpu(), w)
        row["ok"] = all(v_ <= row["tol"] for k_, v_ in row.items() if k_.startswith("err_"))
    except Exception as err:
        row.update(ok=False, error=_why(err))
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------

def markdown(result: dict) -> str:
    cut = " (cut off: the rows measured before the run stopped)" if result.get("partial") else ""
    lines = [f"# Top-k chunk selection benchmark: {result['device']}, {result['date']}{cut}", "",
             f"torch {result['torch']}, Triton {result['triton']}. Tokens per batch {result['tokens']} (B * T). "
             "Cells: ms (x SDPA = sdpa_cudnn ms / this ms, same run and shape; higher = faster); "
             "selection and block-mask building counted inside the Flex and fla columns. "
             "[n]: the reason a cell did not run, below each table.", ""]
    rows = result["rows"]
    columns = [c for c in COLUMNS if any(r["column"] == c for r in rows)]
    by_name = {c["name"]: Case(**c) for c in result["cases"]}
    for name in dict.fromkeys(r["case"] for r in rows):
        case = by_name[name]
        here = [r for r in rows if r["case"] == name]
        cols = [c for c in columns if not (c == "fla_nsa" and not case.gqa)]
        lines += [f"## {case.label}: `{case.spec}` (local = {str(case.local).lower()})", ""]
        shapes = sorted({(r["T"], r["dim"], r["B"], r["HQ"], r["HKV"]) for r in here})
        fractions = ", ".join(f"T {T}: {attended_pairs(case, T) / (T * (T + 1) / 2):.3f}"
                              for T in sorted({s[0] for s in shapes}) if T % case.chunk == 0)
        lines += [f"Attended pairs / dense causal pairs: {fractions}.", ""]
        notes: dict[str, int] = {}
        lines += ["| T | D | B x HQ/HKV | pass | " + " | ".join(LABELS[c] for c in cols) + " |",
                  "|---|---|---|---|" + "---|" * len(cols)]
        for T, dim, B, HQ, HKV in shapes:
            for p, label in (("fwd", "fwd"), ("fwdbwd", "fwd+bwd")):
                cells = []
                for c in cols:
                    r = next((r for r in here if (r["T"], r["dim"], r["column"]) == (T, dim, c)), None)
                    if r is None:
                        cells.append("not run")
                        continue
                    why = r.get("skip") or r.get(f"{p}_skip")
                    if why:
                        cells.append(f"skipped [{notes.setdefault(why, len(notes) + 1)}]")
                    elif c == BASELINE:
                        cells.append(f"{r[f'{p}_ms']:.3f}")
                    else:
                        x = r.get(f"{p}_x_sdpa")
                        cells.append(f"{r[f'{p}_ms']:.3f} ({x:.2f}x)" if x is not None else f"{r[f'{p}_ms']:.3f} (no baseline)")
                lines.append(f"| {T} | {dim} | {B} x {HQ}/{HKV} | {label} | " + " | ".join(cells) + " |")
        lines += [""] + [f"[{i}] {why}" for why, i in notes.items()] + [""]
        if not case.gqa:
            for pub in result.get("published", []):
                lines.append(f"Published, quoted, NOT measured here ({pub['source']}): {pub['what']}: " +
                             ", ".join(f"T {T} {x}x" for T, x in pub["ratios"].items()) + ".")
            lines.append("")
    if result.get("check"):
        lines += ["## Check against seqdsl's reference (float64 oracle)", "",
                  "| check | case | local | encoding | T | HQ/HKV | D | dtype | o | dq | dk | dv | blocks | ok |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in result["check"]:
            def e(name, c=c):
                return f"{c[name]:.1e}" if name in c else "-"
            status = c["ok"] if "skip" not in c else f"skipped: {c['skip']}"
            if c.get("error"):
                status = f"False: {c['error'][:120]}"
            lines.append(f"| {c['check']} | {c['case']} | {c['local']} | {c.get('encoding', '-')} | {c['T']} | "
                         f"{c['HQ']}/{c['HKV']} | {c['dim']} | {c['dtype']} | {e('err_o')} | {e('err_dq')} | "
                         f"{e('err_dk')} | {e('err_dv')} | {e('err_blocks')} | {status} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    unknown = [c for c in args.cases.split(",") if c not in CASES]
    unknown += [c for c in args.columns.split(",") if c and c not in COLUMNS]
    if unknown:
        raise SystemExit(f"unknown case or column: {', '.join(unknown)}")
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        args.lengths, args.dims, args.tokens = "256", "16", 256
    os.environ.setdefault("SEQDSL_CACHE_DIR", tempfile.mkdtemp(prefix="seqdsl_kernels_"))
    import torch
    import triton

    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    cases = [CASES[c] for c in args.cases.split(",")]
    checked = cases  # the check runs the cases' own k and chunk, at small T
    if args.smoke:  # timings: the chunks halved (128 -> 64, 64 -> 32), T = 256 has 4 or 8 of them
        cases = [c if c.element else dataclasses.replace(c, chunk=c.chunk // 2) for c in cases]
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = results_stem("bench_topk", name, device.type, date, args.smoke)
    if args.cases != ",".join(CASES):
        stem += "_" + "_".join(c.name for c in cases)
    if args.suffix:
        stem += "_" + args.suffix

    def save(rows, check=(), partial=True) -> dict:
        rows = [dict(r) for r in rows]
        ratios(rows)
        result = dict(device=name, date=date, torch=torch.__version__, triton=triton.__version__,
                      tokens=args.tokens, args=vars(args), cases=[dataclasses.asdict(c) for c in cases],
                      baseline=BASELINE, rows=rows, check=list(check), published=PUBLISHED, partial=partial)
        return write_results(out, stem, result, json.dumps(result, indent=1), markdown(result))

    check = run_check(checked, device, args) if args.check else []
    if check and not all(c["ok"] is not False for c in check):
        print("CHECK FAILED: the timings below are of a selection that differs from the reference", flush=True)
    rows = measure(args, device, cases, lambda rows: save(rows, check))
    result = save(rows, check, partial=False)
    print(markdown(result))
    return 0 if all(c["ok"] is not False for c in check) else 1


if __name__ == "__main__":
    sys.exit(main())
