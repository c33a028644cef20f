"""The Triton backend, CUDA only, every op after a self-check against the reference:

    triton.top1_* / topk_*   the selection kernels generated from the key (seqdsl/kernels,
                             docs/kernels.md), checked against seqdsl/reference/top1.py. Whole
                             sequences run the kernels planning bound (`bind`, outside any
                             torch.compile region), one decoding step at the end of the cache the
                             decode kernel; a chunk of several queries against a cache runs on
                             the reference.
    triton.delta_chunk       the delta rule's chunked reference with its state passing in one
                             kernel per direction (seqdsl/kernels/state_pass.py) and, from 16-bit
                             inputs, its chunk products in that dtype (`delta_chunk_products`),
                             checked against the chunked reference in float64; decoding steps run
                             the reference's.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdsl.ir.key import Dense, KernelKey, shared_kv_group
from seqdsl.lower.backends import reference
from seqdsl.lower.inputs import AttentionInputs, RecurrentInputs
from seqdsl.reference import attention as attn_ref
from seqdsl.reference import selfcheck

DELTA_CHUNK = "triton.delta_chunk"


class TritonBackend:
    def what(self, op: str) -> str:
        if op == DELTA_CHUNK:
            return "the chunked reference with its state passing in a Triton kernel"
        return "generated Triton kernel"

    def facts(self, key: KernelKey) -> str:
        if key.family == "recurrent":  # the kernel is specialised on the state's widths alone
            return f"K={key.feature_dim} V={key.value_cols} decay={key.decay_shape}"
        return repr(key)  # generated from the whole key

    def known_refusal(self, key: KernelKey, op: str) -> str:
        try:
            if op == DELTA_CHUNK:
                from seqdsl.kernels import state_pass  # noqa: F401
            else:
                from seqdsl.kernels import top1  # noqa: F401
        except ImportError as err:
            return f"the Triton kernels are not importable here ({err})"
        return ""

    def self_check(self, key: KernelKey, op: str, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        if op == DELTA_CHUNK:
            return delta_chunk_self_check(key, dtype, device)
        from seqdsl.kernels import top1

        return top1.self_check(key, dtype, device)

    def recur(self, key: KernelKey, op: str, m: RecurrentInputs, S: Tensor | None, *,
              step_checked: bool = False) -> tuple[Tensor, Tensor]:
        assert op == DELTA_CHUNK, f"the Triton backend runs no recurrent op {op!r}"
        return delta_chunk(key, m, S)

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


def delta_chunk(key: KernelKey, m: RecurrentInputs, S: Tensor | None) -> tuple[Tensor, Tensor]:
    """`triton.delta_chunk`: the chunked reference with its state passing in the kernel and its
    chunk products in `delta_chunk_products(m)`."""
    from seqdsl.kernels import state_pass

    return reference.recurrent_reference(key, m, S, False, state_pass.affine_states, delta_chunk_products(m))


def delta_chunk_products(m: RecurrentInputs) -> torch.dtype | None:
    """The precision of `triton.delta_chunk`'s chunk products: the values' dtype where it is a
    16-bit one (the projections' output under autocast; q or the decay may arrive in float32),
    as fla's chunk kernels compute; float32 or float64 inputs keep every product in theirs."""
    return m.v.dtype if m.v.dtype in (torch.bfloat16, torch.float16) else None


def delta_chunk_inputs(key: KernelKey, dtype: torch.dtype, device: torch.device, T: int = 200) -> list:
    """Random delta-rule inputs shaped like the key's calls (one batch, two heads; T = 200: three
    whole chunks of the reference's 64 and a partial fourth), with its kind of decay, and an
    initial state, in the order of `_DELTA_ARGS`."""
    draw = selfcheck.Draws(device)
    K, V, H = key.feature_dim, key.value_cols, 2
    q = draw.normal(1, T, H, K, dtype=dtype) * K ** -0.5
    k = torch.nn.functional.normalize(draw.normal(1, T, H, K), dim=-1).to(dtype)
    v = draw.normal(1, T, H, V, dtype=dtype)
    log_decay = None
    if key.decay_shape != "none":
        log_decay = -draw.uniform(1, T, H, *((K,) if key.decay_shape == "vector" else ())) * 0.5
    beta = torch.sigmoid(draw.normal(1, T, H)).to(dtype)
    return [q, k, v, log_decay, beta, draw.normal(1, H, K, V) * 0.1]


_DELTA_ARGS = ("q", "k", "v", "log_decay", "beta", "initial_state")


def delta_chunk_self_check(key: KernelKey, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
    """`triton.delta_chunk` as it runs (`delta_chunk`) against the chunked reference with its own
    loop and every product in float64: outputs, final state and every input's gradient, from
    inputs in `dtype`. Tolerance: TF32's for float32 (where torch allows TF32, the chunk
    algebra's cuBLAS products round to it; the kernel's own products do not,
    kernels/state_pass.py), the recurrent fast paths' for 16-bit inputs (the products in bf16)."""

    def reference_run(q, k, v, log_decay, beta, S):
        m = RecurrentInputs(q=q, k=k, v=v, log_decay=log_decay, beta=beta)
        return reference.recurrent_reference(key, m, S, False)

    def fast_run(q, k, v, log_decay, beta, S):
        return delta_chunk(key, RecurrentInputs(q=q, k=k, v=v, log_decay=log_decay, beta=beta), S)

    return selfcheck.self_check(
        fast_run, reference_run, delta_chunk_inputs(key, dtype, device), _DELTA_ARGS,
        outputs=("output", "state"), tolerance=1e-8 if dtype == torch.float64 else selfcheck.TF32_TOLERANCE[dtype],
        reference_dtype=torch.float64, device=device)
