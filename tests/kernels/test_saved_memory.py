"""What the generated Top-1 kernels keep for the backward, in bytes per (B, T, H, Dv) element.

The memory target (peak <= 1.2x SDPA's, docs/kernels.md) is met on a GPU only if the training
forward keeps little beyond what SDPA keeps (its output, in the input dtype, and one float32
log-sum-exp per query row). These tests count the tensors autograd saves through the custom
ops (saved_tensors_hooks), inputs excluded, so the budget is checked without a GPU: one
(B, T, H, Dv) tensor in the input dtype (element: the soft output p @ v; chunk: the output) plus
at most eight 4-byte numbers per query row (idx, lse; sel, lsec, gate, lse, perm) and the chunk
offsets. Exact with the STE keeps a second tensor, GW (B, T, H, Dk), the gate's dq direction
its selection scan computes (it replaces a backward pass over every earlier key). float16
inputs: a float32 soft output (the kernels' first version) breaks the budget.
"""

from __future__ import annotations

import pytest
import torch

from seqdsl.kernels import top1
from tests.kernels.keys import variant

B, T, H, D = 1, 40, 2, 32
ROW_NUMBERS = 8  # 4-byte numbers per query row the budget allows


def saved_bytes_per_element(key, dtype) -> float:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, T, H, D, generator=gen).to(dtype).requires_grad_() for _ in range(3))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        top1.run(key, q, k, v)
    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    extra = [t for t in saved if t.untyped_storage().data_ptr() not in inputs]
    assert extra, "the training op saved nothing beyond its inputs: the hooks did not see it"
    return sum(t.untyped_storage().nbytes() for t in extra) / (B * T * H * D)


@pytest.mark.parametrize("spec,tensors", [("top1_element", 1), ("top1_chunk_exact", 2), ("top1_chunk_approx", 1)])
def test_training_forward_saves_its_tensors_in_the_input_dtype_plus_row_statistics(spec, tensors):
    chunk = {} if spec == "top1_element" else {"chunk": 16}
    key = variant(spec, dk=D, dv=D, **chunk)
    n_chunks = -(-T // 16)
    offsets = 0 if spec == "top1_element" else B * H * (n_chunks + 1) * 4 / (B * T * H * D)
    budget = tensors * torch.float16.itemsize + ROW_NUMBERS * 4 / D + offsets
    got = saved_bytes_per_element(key, torch.float16)
    assert got <= budget, f"{spec} saves {got:.3f} bytes per element, budget {budget:.3f}"
    assert got >= tensors * torch.float16.itemsize  # the soft output / output (and GW) are kept


@pytest.mark.parametrize("spec", ["top1_element", "top1_chunk_exact"])
def test_backward_gets_no_zero_gradients_for_the_saved_outputs(spec):
    """The training op's extra outputs (soft output, GW, row statistics) are non-differentiable:
    autograd must not build a zero gradient for each (one more (B, T, H, D) tensor at the peak)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    chunk = {} if spec == "top1_element" else {"chunk": 16}
    key = variant(spec, dk=D, dv=D, **chunk)
    q, k, v = (torch.randn(B, T, H, D).requires_grad_() for _ in range(3))
    out = top1.run(key, q, k, v)
    with Record() as record:
        out.backward(torch.randn_like(out))
    assert any("_bwd" in op for op in record.ops), record.ops  # the mode saw the backward op
    assert not [op for op in record.ops if "zeros" in op or "fill" in op or "full" in op], record.ops
