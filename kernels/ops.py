"""torch.library custom ops around the generated selection kernels, one set per kernel key.

Op names come from `key.slug()` (seqdsl::<slug>_infer / _train / _bwd, each with its schema's
digest appended: seqdsl/custom_ops.py). Each op has a fake
(meta) implementation, so `torch.compile` traces through a model without graph breaks, and the
training op has its backward registered with `register_autograd`. The ops take (B, T, H, D)
contiguous tensors of one dtype; the differentiable entry point is `seqdsl.kernels.top1.run`.
The training op's extra outputs (what the backward needs) are non-differentiable, and their
gradients are not materialised: autograd would otherwise pass a zero tensor for each, as large
as the soft output or GW (the H100 profile showed the zero fills, and the peak memory one
(B, T, H, D) tensor above what the kernels allocate). `do` is then None only when o got no
gradient, and the backward returns none.

Shape legend: q (B, T, H, Dk); k (B, T, HK, Dk), v (B, T, HK, Dv) with HK = H / shared_kv_group(key)
(grouped-query attention, read in place; else HK = H); o (B, T, H, Dv); per-query rows (B*H, T);
N chunks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from seqdsl.custom_ops import custom_op
from seqdsl.ir.key import KernelKey
from seqdsl.ir.key import chunk_size, runs_topk_kernels, selection, shared_kv_group
from seqdsl.ir.support import attention_key, group_attention
from seqdsl.kernels import chunk, element, topk_chunk, topk_element


@dataclass(frozen=True)
class Ops:
    infer: Callable  # (q, k, v) -> o, no autograd
    train: Callable  # (q, k, v) -> (o, *saved), differentiable in q, k, v through o


def _rows(q: Tensor, dtype) -> Tensor:
    B, T, H, _ = q.shape
    return q.new_empty(B * H, T, dtype=dtype)


def _kbar(key: KernelKey, q: Tensor, k: Tensor) -> Tensor:
    """The fake of `chunk.kbar_for`: (B, N_full or 1, HK, Dk) float32 mean keys (Approx), a
    (1, 1, 1, 1) placeholder for Exact."""
    B, T = q.shape[:2]
    if selection(key).score == "mean":
        return q.new_empty(B, max(T // chunk_size(selection(key)), 1), k.shape[2], q.shape[-1], dtype=torch.float32)
    return q.new_empty(1, 1, 1, 1, dtype=torch.float32)


def _output_fake(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Every inference op's fake: o (B, T, H, Dv)."""
    return v.new_empty(*q.shape[:3], v.shape[-1])


def _grads_fake(q: Tensor, k: Tensor, v: Tensor, *rest: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Every backward op's fake: (dq, dk, dv) shaped as q, k, v (the ops return them so)."""
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _register_autograd_from_output(train, bwd) -> None:
    """The autograd of a chunk training op (o, *saved) = train(q, k, v) whose backward op takes
    (q, k, v, o, dO, *saved): the saved outputs are non-differentiable."""

    def setup_context(ctx, inputs, output):
        o, *saved = output
        ctx.save_for_backward(*inputs, o, *saved)
        ctx.mark_non_differentiable(*saved)
        ctx.set_materialize_grads(False)  # (module docstring)

    def backward(ctx, do, *_):
        if do is None:
            return None, None, None
        q, k, v, o, *saved = ctx.saved_tensors
        return bwd(q, k, v, o, do, *saved)

    train.register_autograd(backward, setup_context=setup_context)


def _element_ops(key: KernelKey) -> Ops:
    slug = key.slug()
    group = shared_kv_group(key)  # query heads per key/value head of k and v

    @custom_op(f"{slug}_infer")
    def infer(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return element.forward(key, q, k, v, with_soft=False, kv_group=group)[0]

    infer.register_fake(_output_fake)

    ste = selection(key).grad == "ste"  # grad = none: the backward needs the arg-max alone

    @custom_op(f"{slug}_train")
    def train(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return element.forward(key, q, k, v, with_soft=ste, kv_group=group)

    @train.register_fake
    def _(q, k, v):
        B, T, H, _ = q.shape
        o = v.new_empty(B, T, H, v.shape[-1])
        n = T if ste else 0
        return (o, _rows(q, torch.int32), q.new_empty(B * H, n, dtype=torch.float32),
                o.new_empty(B, n, H, v.shape[-1]))  # the soft output in the inputs' dtype, as element.forward

    @custom_op(f"{slug}_bwd")
    def bwd(q: Tensor, k: Tensor, v: Tensor, do: Tensor, idx: Tensor, lse: Tensor,
            o_soft: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return element.backward(key, q, k, v, do, idx, lse, o_soft)

    bwd.register_fake(_grads_fake)

    def setup_context(ctx, inputs, output):
        q, k, v = inputs
        _, idx, lse, o_soft = output
        ctx.save_for_backward(q, k, v, idx, lse, o_soft)
        ctx.mark_non_differentiable(idx, lse, o_soft)
        ctx.set_materialize_grads(False)  # (module docstring)

    def backward(ctx, do, *_):
        if do is None:
            return None, None, None
        return bwd(*ctx.saved_tensors[:3], do, *ctx.saved_tensors[3:])

    train.register_autograd(backward, setup_context=setup_context)
    return Ops(infer, train)


_CHUNK_SAVED = ("sel", "lsec", "gate", "gw", "lse", "perm", "starts", "kbar")


def _chunk_ops(key: KernelKey) -> Ops:
    slug = key.slug()
    ste = selection(key).grad == "ste"
    C = chunk_size(selection(key))

    @custom_op(f"{slug}_infer")
    def infer(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return chunk.forward(key, q, k, v, with_stats=False)[0]

    infer.register_fake(_output_fake)

    @custom_op(f"{slug}_train")
    def train(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                                        Tensor]:
        o, saved = chunk.forward(key, q, k, v, with_stats=ste)
        return (o, *(saved[name] for name in _CHUNK_SAVED))

    @train.register_fake
    def _(q, k, v):
        B, T, H, _ = q.shape
        stats = q.new_empty(B * H, T if ste else 0, dtype=torch.float32)
        n_chunks = (T + C - 1) // C
        gw = torch.empty_like(q) if ste and selection(key).score == "max" else q.new_empty(0)
        return (v.new_empty(B, T, H, v.shape[-1]), _rows(q, torch.int32), stats, stats.new_empty(stats.shape), gw,
                _rows(q, torch.float32), _rows(q, torch.int32), q.new_empty(B * H, n_chunks + 1, dtype=torch.int32),
                _kbar(key, q, k))

    @custom_op(f"{slug}_bwd")
    def bwd(q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, sel: Tensor, lsec: Tensor, gate: Tensor,
            gw: Tensor, lse: Tensor, perm: Tensor, starts: Tensor, kbar: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        saved = dict(zip(_CHUNK_SAVED, (sel, lsec, gate, gw, lse, perm, starts, kbar)))
        return chunk.backward(key, q, k, v, o, do, saved)

    bwd.register_fake(_grads_fake)
    _register_autograd_from_output(train, bwd)
    return Ops(infer, train)


_TOPK_SAVED = ("lse", "perm", "starts", "sel", "lsec", "gate", "kbar")


def _topk_chunk_ops(key: KernelKey) -> Ops:
    slug = key.slug()
    K = selection(attention_key(key)).k  # the attended tiles' (seqdsl/ir/support.py)
    C = chunk_size(selection(attention_key(key)))
    ste = selection(key).grad == "ste"
    per_group = group_attention(attention_key(key))

    @custom_op(f"{slug}_infer")
    def infer(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return topk_chunk.forward(key, q, k, v)[0]

    infer.register_fake(_output_fake)

    @custom_op(f"{slug}_train")
    def train(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        o, saved = topk_chunk.forward(key, q, k, v, with_stats=ste)
        return (o, *(saved[name] for name in _TOPK_SAVED))

    @train.register_fake
    def _(q, k, v):
        B, T, H, _ = q.shape
        stats = q.new_empty(B * H, T if ste else 0, dtype=torch.float32)
        if per_group:  # the backward buckets the pairs (kernels/topk_chunk.py)
            perm, starts = q.new_empty(0, dtype=torch.int32), q.new_empty(0, dtype=torch.int32)
        else:
            perm = q.new_empty(B * H, T * K, dtype=torch.int32)
            starts = q.new_empty(B * H, (T + C - 1) // C + 1, dtype=torch.int32)
        return (v.new_empty(B, T, H, v.shape[-1]), _rows(q, torch.float32), perm, starts,
                q.new_empty(B * H, T, K, dtype=torch.int32), stats, stats.new_empty(stats.shape), _kbar(key, q, k))

    @custom_op(f"{slug}_bwd")
    def bwd(q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, lse: Tensor, perm: Tensor, starts: Tensor,
            sel: Tensor, lsec: Tensor, gate: Tensor, kbar: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        saved = dict(zip(_TOPK_SAVED, (lse, perm, starts, sel, lsec, gate, kbar)))
        return topk_chunk.backward(key, q, k, v, o, do, saved)

    bwd.register_fake(_grads_fake)
    _register_autograd_from_output(train, bwd)
    return Ops(infer, train)


def _topk_element_ops(key: KernelKey) -> Ops:
    slug = key.slug()
    K = selection(key).k
    ste = selection(key).grad == "ste"  # the backward needs the surrogate's lse and soft output

    @custom_op(f"{slug}_infer")
    def infer(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return topk_element.forward(key, q, k, v)[0]

    infer.register_fake(_output_fake)

    @custom_op(f"{slug}_train")
    def train(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        o, idx = topk_element.forward(key, q, k, v)
        if ste:
            return (o, idx, *topk_element.surrogate(key, q, k, v))
        B, T, H, Dv = o.shape
        return o, idx, q.new_empty(B * H, 0, dtype=torch.float32), o.new_empty(B, 0, H, Dv)

    @train.register_fake
    def _(q, k, v):
        B, T, H, _ = q.shape
        o = v.new_empty(B, T, H, v.shape[-1])
        n = T if ste else 0
        return (o, q.new_empty(B * H, T, K, dtype=torch.int32), q.new_empty(B * H, n, dtype=torch.float32),
                o.new_empty(B, n, H, v.shape[-1]))

    @custom_op(f"{slug}_bwd")
    def bwd(q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, idx: Tensor, lse: Tensor,
            o_soft: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return topk_element.backward(key, q, k, v, do, idx, lse, o_soft)

    bwd.register_fake(_grads_fake)
    _register_autograd_from_output(train, bwd)
    return Ops(infer, train)


@functools.lru_cache(maxsize=None)
def ops_for(key: KernelKey) -> Ops:
    """The custom ops of `key`, registered once per process."""
    sel = selection(key)
    if sel.over == "element":
        return _element_ops(key) if sel.k == 1 else _topk_element_ops(key)
    return _topk_chunk_ops(key) if runs_topk_kernels(sel) else _chunk_ops(key)
