"""Top-k element selection, k > 1, on the generated kernels
(codegen/templates/topk_element.py.jinja): forward, decode and backward, with grad = none or the
STE (reference/top1.py: the choice's output, the gradient of q and k through the surrogate p, a
softmax over every visible key).

Shape legend: q (B, T, H, Dk); k (B, T, HK, Dk), v (B, T, HK, Dv), HK = H / shared_kv_group(key);
o, dO (B, T, H, Dv); K = the key's k; idx (B*H, T, K) int32, each query's chosen keys, best first
(-1: an empty slot, when fewer than k keys are visible).

Steps (kernels of the module `seqdsl.codegen.render(key)` produced):
    forward   select    -> idx: every visible key ranked (score, then lowest index); a bound tau
                           from the best maxima of groups of keys, the keys at or above it
                           compacted into a scratch row and sorted once (tensor-core q . k, no
                           T x T in memory; a row with more than CAP candidates merges every
                           tile instead)
              attn_fwd  -> o: each query's k keys and values gathered, softmax in float32
    backward  attn_bwd  -> dq (float32, written), dk and dv (float32, atomic sums over queries
                           and a group's heads), cast to the inputs' dtype here
STE (training): the surrogate's statistics (lse, the soft output p @ v) come from the Top-1
element kernels of `surrogate_key(key)` (kernels/element.py, the same visibility, scale,
temperature and grouping), which also give dq and dk (and dv = p^T dO with value_grad = soft)
in the backward; with value_grad = hard, dv = w_sel^T dO from `attn_bwd` without its dq and dk.
Memory beyond the inputs: idx, O(T k); the select's scratch, at most SCRATCH_BYTES (queries
beyond it are selected in further launches); the backward's float32 dk, dv, dq; with the STE
lse (T floats per head) and the soft output (as o).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from seqdsl.codegen.choices import element_slots
from seqdsl.ir.key import KernelKey, selection, shared_kv_group
from seqdsl.kernels import element, launch
from seqdsl.kernels.cache import load
from seqdsl.kernels.element import triton_cdiv


def surrogate_key(key: KernelKey) -> KernelKey:
    """The Top-1 element key whose kernels compute the STE's surrogate for `key`: p = softmax
    over every visible key does not depend on k, and every other field (visibility, scale,
    temperature, grouping, value_grad) is the key's."""
    return dataclasses.replace(key, select=dataclasses.replace(selection(key), k=1))


def _select_rows() -> int:
    """Queries per select program: its tl.dot takes at least 16 rows; the sorted list of twice
    KSLOTS int64 per row bounds it on the GPU."""
    return 16 if launch.interpreted() else 32


SCRATCH_BYTES = 256 << 20  # the select's candidate rows per launch (B*H x rows x CAP int64)


def bound_shape(key: KernelKey) -> tuple[int, int]:
    """(GROUPS, CAP) of the select: a group maximum is taken over GROUPS tiles of KSLOTS keys
    (spans of about 1,024 keys: one sort per span for the bound instead of one per tile), and a
    row keeps up to CAP = 2 KSLOTS candidates (i.i.d. scores give about 1.14 k at k 16 and 64 over
    4,096 keys; the TOPK groups above the bound hold at most TOPK * GROUPS keys)."""
    kslots = element_slots(selection(key).k)
    return max(1, 1024 // kslots), 2 * kslots


def _gather_rows(key: KernelKey, q: Tensor, v: Tensor) -> int:
    """Queries per attention program: its gathered (rows, KSLOTS, D) float32 tiles stay within
    8,192 values (a power of two, at least 2); 16 under the interpreter, whose time goes per program."""
    if launch.interpreted():
        return 16
    wide = max(q.shape[-1], v.shape[-1]) * element_slots(selection(key).k)
    return max(2, 1 << max(0, (8192 // wide).bit_length() - 1))


def forward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, *, q_offset: int = 0) -> tuple[Tensor, Tensor]:
    """(o, idx): o (B, Tq, H, Dv); q's first row sits at position q_offset of k and v (decoding:
    one row at L - 1)."""
    mod = load(key)
    name = key.slug()
    B, Tq, H, _ = q.shape
    prec = launch.precision(q.dtype)
    idx = torch.empty(B * H, Tq, selection(key).k, dtype=torch.int32, device=q.device)
    bm = _select_rows()
    groups, cap = bound_shape(key)
    per_launch = max(bm, SCRATCH_BYTES // (8 * cap * B * H) // bm * bm)  # query rows per launch
    rows = min(per_launch, triton_cdiv(Tq, bm) * bm)
    scratch = torch.empty(B * H, rows, cap, dtype=torch.int64, device=q.device)
    for row0 in range(0, Tq, rows):
        getattr(mod, f"{name}_select")[(B * H, triton_cdiv(min(rows, Tq - row0), bm))](
            q, k, idx, scratch, *launch.strides(q, k), Tq, k.shape[1], q_offset, H, row0, rows,
            BLOCK_M=bm, PREC=prec, GROUPS=groups, CAP=cap)
    o = torch.empty(B, Tq, H, v.shape[-1], dtype=v.dtype, device=v.device)
    bm = _gather_rows(key, q, v)
    getattr(mod, f"{name}_attn_fwd")[(B * H, triton_cdiv(Tq, bm))](
        q, k, v, idx, o, *launch.strides(q, k, v, o), Tq, H, BLOCK_M=bm)
    return o, idx


def surrogate(key: KernelKey, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """(lse, o_soft) of the STE's surrogate (training): the dense pass of the Top-1 element
    kernels, keys and values read in place by the key's grouping (its arg-max is not used)."""
    _, _, lse, o_soft = element.forward(surrogate_key(key), q, k, v, with_soft=True, kv_group=shared_kv_group(key))
    return lse, o_soft


def backward(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, do: Tensor, idx: Tensor, lse: Tensor,
             o_soft: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv): grad = none, of the softmax over each query's chosen keys (the choice has no
    gradient); the STE, dq and dk through the surrogate and dv by value_grad (module docstring).
    lse and o_soft: `surrogate`'s (empty with grad = none)."""
    sel = selection(key)
    ste = sel.grad == "ste"
    do = do.contiguous()
    if ste and sel.value_grad == "soft":  # dv = p^T dO: the surrogate's dense pass writes it
        return element.surrogate_backward(surrogate_key(key), q, k, v, do, lse, o_soft, torch.empty_like(v))
    mod = load(key)
    B, T, H, _ = q.shape
    dv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    # the STE's attn_bwd writes dv alone: dq and dk are never touched, dv stands in for them
    dq = dv if ste else torch.empty(q.shape, dtype=torch.float32, device=q.device)  # every row written
    dk = dv if ste else torch.zeros(k.shape, dtype=torch.float32, device=k.device)
    bm = _gather_rows(key, q, v)
    getattr(mod, f"{key.slug()}_attn_bwd")[(B * H, triton_cdiv(T, bm))](
        q, k, v, idx, do, dq, dk, dv, *launch.strides(q, k, v, do, dk, dv), T, H, BLOCK_M=bm, QK_GRAD=not ste)
    if ste:
        return element.surrogate_backward(surrogate_key(key), q, k, v, do, lse, o_soft, dv.to(v.dtype))
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def decode(key: KernelKey, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """(B, 1, H, Dv): the newest query (position L - 1) against the cache k, v (B, L, H / G, *)."""
    with torch.no_grad():
        return forward(key, q, k, v, q_offset=k.shape[1] - 1)[0]
