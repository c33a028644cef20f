"""The reference backend: seqdsl/reference's oracles as a backend, in float32 at least.

Every mixer can run here, on any device; the fast backends are checked against it and fall back
to it. The recurrent family has two forms of it: `reference.chunked` (the default) and
`reference.recurrent` (step by step; both are forceable, `set_path`).
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.ir.key import Dense, KernelKey, sliding_window
from seqdsl.lower.backends.base import Unchecked
from seqdsl.lower.inputs import AttentionInputs, RecurrentInputs
from seqdsl.reference import attention as attn_ref
from seqdsl.reference import recurrent as rec_ref
from seqdsl.reference import top1 as top1_ref

CHUNKED, RECURRENT = "reference.chunked", "reference.recurrent"


class ReferenceBackend(Unchecked):
    def what(self, op: str) -> str:
        return "the reference"

    def attend(self, key: KernelKey, op: str, m: AttentionInputs, *, dense: Dense | None = None,
               kernels: object = None) -> Tensor:
        return attention_reference(key, m)

    def recur(self, key: KernelKey, op: str, m: RecurrentInputs, S: Tensor | None, *,
              step_checked: bool = False) -> tuple[Tensor, Tensor]:
        return recurrent_reference(key, m, S, op == RECURRENT)


def _in_float32(fn):
    """Run a reference in float32 (float64 stays float64) with autocast off: the
    oracle's numerics must not depend on bf16 autocast (and torch has no bf16 kernels for some
    of its steps, e.g. triangular solves on CPU). Outputs come back in the input dtype."""

    def up(t):
        return t.float() if isinstance(t, Tensor) and t.dtype in (torch.bfloat16, torch.float16) else t

    def wrapped(key, m, *args, **kwargs):
        dtype = m.q.dtype
        if dtype in (torch.float32, torch.float64) and not torch.is_autocast_enabled(m.q.device.type):
            return fn(key, m, *args, **kwargs)
        m32 = replace(m, **{f.name: up(getattr(m, f.name)) for f in fields(m)})
        with torch.autocast(m.q.device.type, enabled=False):
            out = fn(key, m32, *(up(a) for a in args), **kwargs)
        if isinstance(out, tuple):  # (o, state): the state stays float32 between calls
            return (out[0].to(dtype),) + out[1:]
        return out.to(dtype)

    return wrapped


@_in_float32
def attention_reference(key: KernelKey, m: AttentionInputs) -> Tensor:
    """The oracle. Queries are padded with zero rows for the cached positions so the reference
    (which scores a square T x T problem) sees every key at its true position; only the last T
    rows are kept (the padded rows of the bias are zeros). Shared key/value heads are repeated
    to one per query head. O(L^2) per decoding step: fine for an oracle."""
    B, T, H, F_ = m.q.shape
    L = m.k.shape[1]
    k, v = attn_ref.repeat_heads(m.k, H), attn_ref.repeat_heads(m.v, H)
    q = m.q if m.pos == 0 else torch.cat([m.q.new_zeros(B, L - T, H, F_), m.q], dim=1)
    bias = None if m.bias is None else F.pad(m.bias, (0, 0, L - T, 0))
    if key.select is not None:
        out = top1_ref.selection_ref(key, q, k, v, alibi_slopes=m.alibi)
    else:
        chunk_local = key.window if key.visibility == "chunk_local" else None
        out = attn_ref.attention_ref(q, k, v, scale=key.scale, temperature=key.temperature,
                                     window=sliding_window(key), chunk_local=chunk_local, alibi_slopes=m.alibi,
                                     bias=bias, sink=key.sink)
    return out[:, L - T:]


# --- recurrent implementations -----------------------------------------------------------------------

REFERENCE_CHUNK = 64
_REFERENCE_UPDATE = {"additive": "additive", "bonus": "additive", "delta": "delta", "rwkv7": "rwkv7"}


@_in_float32
def recurrent_reference(key: KernelKey, m: RecurrentInputs, S: Tensor | None, step: bool,
                        walk: rec_ref.StateWalk | None = None,
                        products: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """The step-by-step form (`step`, or a single step) or the chunked one, whose state passing
    `walk` may run and whose delta-rule chunk products may run in a lower precision `products`
    (both the Triton backend's `triton.delta_chunk`: seqdsl/kernels/state_pass.py)."""
    if key.decay_shape == "selective":  # Mamba-1's step: rule (1) with a per-channel decay
        assert m.dt is not None and m.rate is not None, "the selective decay comes as a step and a rate"
        log_decay, v = rec_ref.selective_to_additive(m.dt, m.rate, m.v, m.log_decay)
        m = replace(m, log_decay=log_decay, v=v, dt=None, rate=None)
    kwargs: dict[str, Any] = dict(log_decay=m.log_decay, beta=m.beta, update=_REFERENCE_UPDATE[key.update], bonus=m.bonus,
                  a=m.a, kappa=m.kappa, initial_state=S)
    if step or m.q.shape[1] == 1:
        return rec_ref.recurrent_ref(m.q, m.k, m.v, **kwargs)
    # 64: fla's chunk size; per-channel decay builds its (c, c, Dk) decay tensors within sub-chunks
    # of 16 steps (seqdsl/reference/recurrent.py), so it no longer needs smaller chunks
    return rec_ref.chunked_ref(m.q, m.k, m.v, chunk_size=REFERENCE_CHUNK, walk=walk, products=products, **kwargs)
