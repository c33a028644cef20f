"""The Triton backend: the Top-1 selection kernels generated from the key (seqdsl/kernels,
docs/kernels.md), CUDA only, after a self-check against seqdsl/reference/top1.py.

Whole sequences run the kernels planning bound (`bind`, outside any torch.compile region), one
decoding step at the end of the cache the decode kernel; a chunk of several queries against a
cache runs on the reference.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdsl.ir.key import Dense, KernelKey, shared_kv_group
from seqdsl.lower.backends import reference
from seqdsl.lower.inputs import AttentionInputs
from seqdsl.reference import attention as attn_ref


class TritonBackend:
    def what(self, op: str) -> str:
        return "generated Triton kernel"

    def facts(self, key: KernelKey) -> str:
        return repr(key)  # generated from the whole key

    def known_refusal(self, key: KernelKey, op: str) -> str:
        try:
            from seqdsl.kernels import top1  # noqa: F401
        except ImportError as err:
            return f"the generated kernels are not importable here ({err})"
        return ""

    def self_check(self, key: KernelKey, op: str, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        from seqdsl.kernels import top1

        return top1.self_check(key, dtype, device)

    def bind(self, key: KernelKey):
        """The compiled kernels of `key`, registered now: binding inside a torch.compile region
        would be traced (a graph break)."""
        from seqdsl.kernels import top1

        return top1.bind(key)

    def attend(self, key: KernelKey, op: str, m: AttentionInputs, *, dense: Dense | None = None,
               kernels: object = None) -> Tensor:
        from seqdsl.kernels import top1

        T, L = m.q.shape[1], m.k.shape[1]
        if T == 1 and m.pos == L - 1 and not torch.is_grad_enabled():
            if m.k.shape[2] == m.v.shape[2]:  # a grouped cache is read in place, never repeated
                return top1.decode(key, m.q, m.k, m.v)
            # keys per head (random, constant) and values in groups: one head per query head
            return top1.decode(key, m.q, attn_ref.repeat_heads(m.k, key.heads), attn_ref.repeat_heads(m.v, key.heads))
        if m.pos == 0 and T == L:
            assert callable(kernels), "a plan on the Triton backend binds its kernels (TritonBackend.bind)"
            if shared_kv_group(key) > 1:  # grouped-query attention: the shared heads, read in place
                return kernels(m.q, m.k, m.v)
            # keys per head (random, constant) or grouped with the queries: one key/value head per
            # query head (autograd sums a group's gradients through the repeat)
            return kernels(m.q, attn_ref.repeat_heads(m.k, key.heads), attn_ref.repeat_heads(m.v, key.heads))
        return reference.attention_reference(key, m)
