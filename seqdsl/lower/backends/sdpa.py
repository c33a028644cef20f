"""The SDPA backend: torch's scaled_dot_product_attention for the softmax family.

Ops: `sdpa.causal`, with `is_causal` and no mask (flash/cuDNN-eligible on GPU), and `sdpa.mask`,
with an explicit boolean or additive mask (windows, chunk-local, ALiBi, decay, positional). The
support table (seqdsl/ir/support.py) says which a key takes. A mixer that is plain causal
attention within its context (`Dense`) runs on its dense key up to `Dense.upto` tokens; past
that a window or chunk-local span is masked and a selection runs its reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.ir import support
from seqdsl.ir.key import Dense, KernelKey, sliding_window
from seqdsl.lower.backends.base import Unchecked
from seqdsl.lower.backends import reference
from seqdsl.lower.inputs import AttentionInputs
from seqdsl.reference import attention as attn_ref

CAUSAL = "sdpa.causal"


class SdpaBackend(Unchecked):
    def what(self, op: str) -> str:
        return "softmax attention"

    def attend(self, key: KernelKey, op: str, m: AttentionInputs, *, dense: Dense | None = None,
               kernels: object = None) -> Tensor:
        if dense is None:
            return _sdpa(key, m, op)
        if m.k.shape[1] <= dense.upto:  # every restriction covers these keys
            return _sdpa(dense.key, m, op)
        if key.family == "select":  # past the selection's reach
            return reference.attention_reference(key, m)
        return _sdpa(key, m, _op(key))  # past the window: masked


def _op(key: KernelKey) -> str:
    """The support table's SDPA op for a softmax key (it takes every one)."""
    op = support.sdpa(key).op
    assert op is not None, f"SDPA refuses {key!r}: {support.sdpa(key).reason}"
    return op


def op_for(key: KernelKey, device: torch.device) -> tuple[str, str]:
    """The SDPA op for a softmax key and how it is called, in words."""
    op = _op(key)
    how = "is_causal (flash/cuDNN eligible)" if op == CAUSAL and device.type == "cuda" \
        else "is_causal" if op == CAUSAL else "explicit mask"
    return op, how


def _sdpa(key: KernelKey, m: AttentionInputs, op: str) -> Tensor:
    """SDPA as the plan said: `sdpa.causal` (whole sequences from position 0; a chunk against a
    cache takes the mask) or `sdpa.mask`. The support table decides which (seqdsl/ir/support.py:
    e.g. a scale <= 0 gives NaN rows under `is_causal`), not this function."""
    B, T, H, _ = m.q.shape
    L = m.k.shape[1]
    scale = key.scale / key.temperature
    k, v = m.k, m.v
    if k.shape[2] != v.shape[2]:
        # keys shared in query/key groups and values per head, or keys per head (random, constant
        # or no keys) and values in groups: SDPA takes one head count for both, so one per query head
        k, v = attn_ref.repeat_heads(k, H), attn_ref.repeat_heads(v, H)
    # grouped-query attention: SDPA maps query head h to key/value head h // (H / K) itself,
    # so the cache is never repeated to H heads
    gqa = k.shape[2] != H
    q, k, v = (t.transpose(1, 2) for t in (m.q, k, v))  # (B, H or K, *, D)
    if op == CAUSAL and m.pos == 0 and T == L:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
        return out.transpose(1, 2)
    visible = attn_ref.visibility_mask(
        T, window=sliding_window(key),
        chunk_local=key.window if key.visibility == "chunk_local" else None,
        device=q.device, offset=m.pos, keys=L, sink=key.sink)
    bias = None
    # biases in float32 at least (bf16 distances lose whole positions), float64 stays float64
    if m.alibi is not None:
        bias = attn_ref.alibi_bias(m.alibi.to(attn_ref.bias_dtype(q.dtype)), T, offset=m.pos, keys=L)
    if m.bias is not None:
        rows = m.bias.to(attn_ref.bias_dtype(q.dtype))
        bias = rows if bias is None else bias + rows
    if bias is None:
        mask = visible
    else:
        # SDPA adds the mask to the *scaled* scores; the bias is defined on the unscaled-by-
        # temperature scores like the reference, so divide it by the temperature here.
        mask = (bias / key.temperature).masked_fill(~visible, float("-inf")).to(q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    return out.transpose(1, 2)
