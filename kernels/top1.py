"""The entry points the planner calls for a selection mixer whose key the Triton table admits:
Top-1 element and chunk selection (kernels/element.py, kernels/chunk.py) and top-k chunk
selection, k > 1 (kernels/topk_chunk.py). The module keeps its Top-1 name (and `Top1Kernel`),
which the Triton backend, the benchmarks and the tests import.

    bind(key) -> Top1Kernel         checks the key, registers its custom ops; call it as
                                    kernel(q, k, v) -> o (differentiable, torch.compile-safe:
                                    bind outside the compiled region, as a module's attribute)
    run(key, q, k, v) -> o          bind(key)(q, k, v)
    decode(key, q, k, v) -> o       the newest query (one row) against the whole cache
    self_check(key, dtype, device)  (ok, detail): outputs and every gradient vs the reference

Shape legend: q (B, T, H, Dk) after RoPE; k (B, T, HK, Dk), v (B, T, HK, Dv) with HK = H / G,
G = shared_kv_group(key) (grouped-query attention's shared keys and values, read in place; G = 1
where keys or values come one per query head); o (B, T, H, Dv); decoding: q (B, 1, H, Dk)
at position L - 1 of a cache k (B, L, K, Dk), v (B, L, K, Dv), K = key.kv_groups (or H). scale and temperature come from
the key (`key.scale`, `key.temperature`): the same numbers seqdsl/lower passes the reference.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from seqdsl.ir import support
from seqdsl.ir.key import KernelKey
from seqdsl.ir.key import chunk_size, runs_topk_kernels, selection, shared_kv_group, sliding_window
from seqdsl.reference import attention as attn_ref
from seqdsl.reference import selfcheck
from seqdsl.reference import top1 as top1_ref


def _checked(key: KernelKey) -> None:
    verdict = support.triton(key)
    if not verdict.ok:
        raise ValueError(f"the generated Top-1 kernels cannot run {key.slug()}: {verdict.reason}")


def _prepare(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    return q.contiguous(), k.contiguous(), v.contiguous()


class Top1Kernel:
    """The generated kernels of one key, ready to call (what a mixer module holds)."""

    def __init__(self, key: KernelKey):
        from seqdsl.kernels.ops import ops_for

        _checked(key)
        self.key = key
        self.ops = ops_for(key)

    def __call__(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """(B, T, H, Dv) the Top-1 mixer output, with the gradients reference/top1.py defines.
        The training op (keeping what the backward needs) runs only when a gradient is asked."""
        q, k, v = _prepare(q, k, v)
        heads = q.shape[2] // shared_kv_group(self.key)
        if k.shape[2] != heads or v.shape[2] != heads:
            raise ValueError(f"{self.key.slug()}: {q.shape[2]} query heads take {heads} key/value heads "
                             f"(shared_kv_group), got k {tuple(k.shape)}, v {tuple(v.shape)}")
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            return self.ops.train(q, k, v)[0]
        return self.ops.infer(q, k, v)

    def decode(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return decode(self.key, q, k, v)


_BOUND: dict[KernelKey, Top1Kernel] = {}
# the same kernels by the identity of the key objects seen (kept alive by _BOUND's entries and
# here): torch.compile guards on an object's identity, not on a dataclass's value, so a lookup by
# value inside a compiled region could be reused for another key; one by id() is guarded
_BY_ID: dict[int, tuple[KernelKey, Top1Kernel]] = {}


def bind(key: KernelKey) -> Top1Kernel:
    """The kernels of `key`, checked and registered once per process."""
    kernel = _BOUND.get(key)
    if kernel is None:
        kernel = _BOUND[key] = Top1Kernel(key)
    _BY_ID[id(key)] = (key, kernel)
    return kernel


def run(key: KernelKey, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """bind(key)(q, k, v). Under torch.compile(fullgraph=True) this key object must have been
    bound (or run) once outside the compiled region: binding checks the key, registers the
    custom ops, and records the object for the guarded lookup."""
    seen = _BY_ID.get(id(key))
    return (seen[1] if seen is not None else bind(key))(q, k, v)


def decode(key: KernelKey, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """(B, 1, H, Dv) for the query at position L - 1 (no gradient: generation). The cache k, v
    holds one head per H / kv_groups query heads (the key's grouping: a grouped-query cache as
    stored, read in place, query head h reading head h // (H / kv_groups)) or one per query head."""
    from seqdsl.kernels import chunk, element, topk_chunk, topk_element

    _checked(key)
    q, k, v = _prepare(q, k, v)
    if q.shape[1] != 1:
        raise ValueError(f"decode takes one query row, got {q.shape[1]}")
    H = q.shape[2]
    if k.shape[2] not in (key.kv_groups, H) or v.shape[2] != k.shape[2]:
        raise ValueError(f"decode takes a cache of {key.kv_groups} key/value heads for {H} query heads "
                         f"(or {H}), got k {tuple(k.shape)}, v {tuple(v.shape)}")
    kv_group = H // k.shape[2]
    with torch.no_grad():
        if runs_topk_kernels(selection(key)):  # the top-k kernels read the key's grouping (rendered in)
            group = shared_kv_group(key)
            if kv_group != group:  # a cache repeated per query head, or grouped where the key is not
                k, v = ((k[:, :, ::group], v[:, :, ::group]) if kv_group == 1
                        else (attn_ref.repeat_heads(k, H), attn_ref.repeat_heads(v, H)))
            top_k = topk_element if selection(key).over == "element" else topk_chunk
            return top_k.decode(key, q, k.contiguous(), v.contiguous())
        if selection(key).over == "element":
            return element.forward(key, q, k, v, with_soft=False, q_offset=k.shape[1] - 1, kv_group=kv_group)[0]
        return chunk.decode(key, q, k, v, kv_group)


def reference(key: KernelKey, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The oracle for `key` (seqdsl/reference/top1.py), called as seqdsl/lower calls it: shared
    key/value heads repeated to one per query head (autograd sums a group's gradients)."""
    return top1_ref.selection_ref(key, q, attn_ref.repeat_heads(k, q.shape[2]), attn_ref.repeat_heads(v, q.shape[2]))


# norm-relative tolerances against the float64 reference, by input dtype. Wider than the kernels'
# usual error (float32 ~1e-6, bf16 ~3e-3) because a selection may flip on a genuine near-tie: a
# whole output row or one key's gate gradient then differs (measured on an H100: float32 5e-4 for
# Exact's gate at T = 2125; bf16 Approx 2.7e-2). A wrong kernel is off by far more.
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 1e-2}


def compare(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, do: Tensor) -> dict[str, float]:
    """Norm-relative error of the output and of dq, dk, dv against the float64 reference, both
    differentiated against the output gradient `do`."""
    return selfcheck.relative_errors(
        functools.partial(run, key), functools.partial(reference, key), (q, k, v), ("q", "k", "v"),
        reference_dtype=torch.float64, outputs=("o",), cotangents=(do,))


def check_length(key: KernelKey) -> int:
    """The self-check's sequence length: a few chunks with a partial last one; under a window,
    past the sinks and the window by two of the largest tiles (128), so that every loop bound of
    the window kernels is reached (a shorter check never leaves the window's first tile); for k
    chunks, k + 2 chunks and a partial one, so that the last queries have more candidates than
    they keep (with all of them kept, a wrong top-k list or STE gate, whose G would be 1, passes),
    and past the sink tokens by two chunks (queries that did not choose the chunks holding them)."""
    sel = selection(key)
    window = sliding_window(key)
    if window is not None:
        return key.sink + window + 2 * 128 + 5
    if sel.over == "element":
        return max(77, 2 * sel.k + 13)  # more visible keys than k for most queries
    return max((sel.k + 2 if runs_topk_kernels(sel) else 2) * chunk_size(sel), sel.sink + 2 * chunk_size(sel)) + 5


@functools.lru_cache(maxsize=None)
def self_check(key: KernelKey, dtype: torch.dtype, device: torch.device | str) -> tuple[bool, str]:
    """(True, "") when the generated kernels match the reference here (outputs and every
    gradient, random inputs over a few chunks with a partial last one); else (False, why). The
    first call renders and compiles the kernels: seconds (GPU) to a minute (interpreter)."""
    T = check_length(key)
    draw = selfcheck.Draws(device)
    group = shared_kv_group(key)  # two key/value heads, each shared by the key's group of query heads
    q = draw.normal(2, T, 2 * group, key.feature_dim, dtype=dtype)
    k, v = (draw.normal(2, T, 2, d, dtype=dtype) for d in (key.feature_dim, key.head_dim))
    return selfcheck.self_check(
        functools.partial(run, key), functools.partial(reference, key), (q, k, v), ("q", "k", "v"),
        outputs=("o",), tolerance=TOLERANCE.get(dtype, 1e-4), reference_dtype=torch.float64, device=device)
