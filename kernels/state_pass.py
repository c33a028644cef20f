"""The chunked delta rule's state passing in one Triton kernel per direction.

Shape legend: R independent recurrences (batch x heads, flattened), N chunks, Dk the state's rows
(key width), Dv its columns (value width).

    M   (R, N, Dk, Dk)   each chunk's transition, diag(decay) + the delta rule's low-rank part
    b   (R, N, Dk, Dv)   each chunk's write
    S0  (R, Dk, Dv)      the state entering the first chunk
    S   (R, N+1, Dk, Dv) S[0] = S0, S[n+1] = M[n] S[n] + b[n]

The chunked reference (`seqdsl/reference/recurrent.py: affine_states`) runs this as a loop of N
small products, in order: one launch per chunk and direction (32 at 2K tokens, 468 launches and
10.8 ms of a 178.7 ms Gated DeltaNet step in the H100 profile of docs/training.md; this kernel
took 3.2 ms of a 164.1 ms step in 24 launches), and a loop that torch.compile unrolls into the
graph it compiles (one layer's compilation: 25.9-29.7 s with the loop, 9.5-10.8 s with the kernel). Here one program per recurrence and
block of state columns holds its slice of the state in registers and walks the chunks (columns
are independent: M multiplies from the left), reading each transition once.

The backward is the same walk in reverse with M transposed: the adjoint A[N] = dS[N],
A[n] = M[n]^T A[n+1] + dS[n]; then dS0 = A[0], db[n] = A[n+1] and dM[n] = A[n+1] S[n]^T, the
last one batched GEMM over every chunk at once (it needs whole rows of A and S, which the
column blocks split).

Precision: where torch allows TF32 for float32 matmuls (`torch.backends.cuda.matmul.allow_tf32`,
seqdsl train's `tf32 = true`) the products run on tensor cores as three TF32 products
(`tf32x3`, the operands split into a high and a low TF32 part), about float32's accuracy;
else in full float32 (`ieee`). Plain TF32 drifted: over 32 chained products of 64-wide
transitions the states' error against float64 was 2.6e-3 of their norm on an H100, against
4.4e-4 for the reference's loop of cuBLAS TF32 matmuls (Triton's TF32 drops the low mantissa
bits, cuBLAS rounds them; `benchmarks/results/state_pass_gpu_2026-11-28/`). The walk is bound
by latency, not by its products, so the two extra products cost little. This kernel is written
by hand, not generated: nothing in it depends on the spec but the widths.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from seqdsl.custom_ops import custom_op
from seqdsl.kernels import launch

WIDTHS = (16, 32, 64, 128)  # Dk and Dv as whole tiles (tl.arange, tensor-core products)


@triton.jit
def _walk(M, C, X0, X, N, DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr,
          REVERSE: tl.constexpr, PREC: tl.constexpr):
    """Forward (REVERSE = 0): X[0] = X0, X[n+1] = M[n] X[n] + C[n].
    Reverse (REVERSE = 1): X[N] = X0, X[n] = M[n]^T X[n+1] + C[n] (the adjoint walk).
    Every tensor contiguous; program (r, j) owns columns j*BV .. j*BV+BV-1 of recurrence r."""
    r = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, DK)
    cols = tl.program_id(1) * BV + tl.arange(0, BV)
    tile = rows[:, None] * DV + cols[None, :]  # (DK, BV) offsets inside one (DK, DV) state
    if REVERSE:
        square = rows[None, :] * DK + rows[:, None]  # M^T: element (i, j) read from M[j, i]
    else:
        square = rows[:, None] * DK + rows[None, :]
    x = tl.load(X0 + r * DK * DV + tile)  # the state stays in the inputs' dtype (float32 or float64)
    states = X + r * (N + 1) * DK * DV
    tl.store(states + (N if REVERSE else 0) * DK * DV + tile, x)
    for i in range(N):
        if REVERSE:
            n = N - 1 - i
            out = n
        else:
            n = i
            out = i + 1
        m = tl.load(M + (r * N + n) * DK * DK + square)
        c = tl.load(C + (r * N + n) * DK * DV + tile)
        x = tl.dot(m, x, input_precision=PREC) + c
        tl.store(states + out * DK * DV + tile, x)


def _precision(dtype: torch.dtype) -> str:
    """tl.dot's input precision (module docstring)."""
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32x3"
    return "ieee"


def _column_block(Dv: int) -> int:
    """State columns per program: 32 of 64 doubles the programs (B x H recurrences fill few of an
    H100's 132 SMs at batch 16 x 12 heads) at the price of reading each transition twice."""
    return 16 if launch.interpreted() else min(Dv, 32)


def walk(M: Tensor, C: Tensor, X0: Tensor, *, reverse: bool) -> Tensor:
    """(R, N+1, Dk, Dv): the forward recurrence, or with `reverse` the adjoint walk (module
    docstring). M (R, N, Dk, Dk), C (R, N, Dk, Dv), X0 (R, Dk, Dv), one float dtype, contiguous."""
    R, N, Dk, Dv = C.shape
    if not M.dtype == C.dtype == X0.dtype:
        raise ValueError(f"the state-passing kernel takes one dtype; got {M.dtype}, {C.dtype}, {X0.dtype}")
    if Dk not in WIDTHS or Dv not in WIDTHS:
        raise ValueError(f"state widths {Dk}x{Dv}: the state-passing kernel takes {WIDTHS}")
    if C.device.type != "cuda" and not launch.interpreted():
        raise RuntimeError("the state-passing kernel runs on CUDA (or under TRITON_INTERPRET=1)")
    X = torch.empty(R, N + 1, Dk, Dv, dtype=C.dtype, device=C.device)
    BV = _column_block(Dv)
    _walk[(R, Dv // BV)](M, C, X0, X, N, DK=Dk, DV=Dv, BV=BV, REVERSE=reverse, PREC=_precision(C.dtype),
                         num_warps=4, num_stages=2 if not launch.interpreted() else 1)
    return X


@custom_op("affine_states")
def _states(M: Tensor, b: Tensor, S0: Tensor) -> Tensor:
    return walk(M, b, S0, reverse=False)


@_states.register_fake
def _(M, b, S0):
    R, N, Dk, Dv = b.shape
    return b.new_empty(R, N + 1, Dk, Dv)


@custom_op("affine_states_adjoint")
def _adjoint(M: Tensor, dS: Tensor) -> Tensor:
    """A (R, N+1, Dk, Dv) from dS (R, N+1, Dk, Dv): A[N] = dS[N], A[n] = M[n]^T A[n+1] + dS[n]."""
    N = M.shape[1]
    return walk(M, dS[:, :N].contiguous(), dS[:, N].contiguous(), reverse=True)


@_adjoint.register_fake
def _(M, dS):
    return torch.empty_like(dS)


def _setup_context(ctx, inputs, output):
    M, _, _ = inputs
    ctx.save_for_backward(M, output)


def _backward(ctx, dS):
    M, S = ctx.saved_tensors
    A = _adjoint(M, dS.contiguous())
    after = A[:, 1:]  # A[n+1]: the gradient reaching the state each chunk writes
    dM = after @ S[:, :-1].transpose(-1, -2)
    return dM, after, A[:, 0]


_states.register_autograd(_backward, setup_context=_setup_context)


def affine_states(M: Tensor, b: Tensor, S0: Tensor) -> Tensor:
    """(..., N+1, Dk, Dv) with S[0] = S0 and S[n+1] = M[n] S[n] + b[n], differentiable in all
    three: `seqdsl/reference/recurrent.py: affine_states` on the kernel. M (..., N, Dk, Dk),
    b (..., N, Dk, Dv), S0 (..., Dk, Dv), one dtype."""
    lead, (N, Dk, Dv) = b.shape[:-3], b.shape[-3:]
    flat = lambda t, *tail: t.reshape(-1, *tail).contiguous()
    S = _states(flat(M, N, Dk, Dk), flat(b, N, Dk, Dv), flat(S0, Dk, Dv))
    return S.reshape(*lead, N + 1, Dk, Dv)
