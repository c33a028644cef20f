"""The depthwise causal convolution with SiLU of stage (1) (Mamba, Mamba-2, Based, DeltaNet) in one
Triton kernel per direction, for calls from position 0 (training, prefill).

Shape legend: u, y, du (B, T, C), C channels contiguous; weight, dw (C, S), S taps.

    forward    y_t  = silu(a_t),  a_t = sum_s w_s u_(t+s-(S-1)),  u_(<0) = 0
    backward   g_t  = dy_t silu'(a_t)                       (a recomputed from u, never stored)
               du_t = sum_s w_s g_(t+(S-1)-s)               (g_(>=T) = 0)
               dw_s = sum_(b,t) g_t u_(t+s-(S-1))

`seqdsl/reference/conv.py: causal_conv_silu` is the oracle. Under torch.compile the taps as
PyTorch ops became four fused elementwise kernels and a reduction that took 26 ms of a 154 ms
Mamba-2 training step (24 layers, 16 x 2048 tokens, 1,792 channels; H200, 2026-11-28,
`benchmarks/results/conv_h200_2026-11-28/`), several times what their bytes need: one pass over
u for the forward, one over u and dy for the backward, here. The taps are summed in float32
and y, du keep u's dtype; dw is reduced over the batch and time in float32, per program then
across programs in a fixed order (deterministic: no atomics).

Written by hand, not generated: nothing in it depends on the spec but the channels and taps.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

from seqdsl.custom_ops import custom_op
from seqdsl.ir.support import CONV_MAX_TAPS
from seqdsl.kernels import launch

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _forward(U, W, Y, T, C, S: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    b = tl.program_id(2).to(tl.int64)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = c < C
    base = b * T * C
    a = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
    for s in tl.static_range(S):
        src = t + (s - (S - 1))
        w = tl.load(W + c * S + s, mask=cm, other=0.0).to(tl.float32)
        keep = ((src >= 0) & (src < T))[:, None] & cm[None, :]
        x = tl.load(U + base + src[:, None] * C + c[None, :], mask=keep, other=0.0).to(tl.float32)
        a += x * w[None, :]
    y = a * tl.sigmoid(a)
    tl.store(Y + base + t[:, None] * C + c[None, :], y.to(Y.dtype.element_ty), mask=(t < T)[:, None] & cm[None, :])


@triton.jit
def _gate_grad(U, DY, W, base, p, c, cm, T, C, S: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """g_p = dy_p silu'(a_p) at the positions p (zero past T), a_p recomputed from u."""
    a = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
    for s in tl.static_range(S):
        src = p + (s - (S - 1))
        w = tl.load(W + c * S + s, mask=cm, other=0.0).to(tl.float32)
        keep = ((src >= 0) & (src < T))[:, None] & cm[None, :]
        a += tl.load(U + base + src[:, None] * C + c[None, :], mask=keep, other=0.0).to(tl.float32) * w[None, :]
    inside = (p < T)[:, None] & cm[None, :]
    dy = tl.load(DY + base + p[:, None] * C + c[None, :], mask=inside, other=0.0).to(tl.float32)
    sig = tl.sigmoid(a)
    return dy * sig * (1.0 + a * (1.0 - sig))


@triton.jit
def _backward(U, W, DY, DU, DWP, T, C, SPAN, S: tl.constexpr, S_POW2: tl.constexpr, BLOCK_T: tl.constexpr,
              BLOCK_C: tl.constexpr):
    """Program (j, cb, b) owns rows j*SPAN .. (j+1)*SPAN-1 of sequence b and one block of
    channels: du for those rows, and its share of dw, written to DWP[b * n_spans + j]."""
    j = tl.program_id(0)
    b = tl.program_id(2).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = c < C
    base = b * T * C
    rows = tl.arange(0, BLOCK_T)
    taps = tl.arange(0, S_POW2)  # dw's columns, as a 2-D accumulator
    dw = tl.zeros((BLOCK_C, S_POW2), dtype=tl.float32)
    for start in range(j * SPAN, tl.minimum(j * SPAN + SPAN, T), BLOCK_T):
        t = start + rows
        du = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
        for r in tl.static_range(S):  # y_(t+r) reads u_t through tap S-1-r
            g = _gate_grad(U, DY, W, base, t + r, c, cm, T, C, S, BLOCK_T, BLOCK_C)
            w = tl.load(W + c * S + (S - 1 - r), mask=cm, other=0.0).to(tl.float32)
            du += g * w[None, :]
            if r == 0:
                for s in tl.static_range(S):
                    src = t + (s - (S - 1))
                    keep = ((src >= 0) & (src < T))[:, None] & cm[None, :]
                    x = tl.load(U + base + src[:, None] * C + c[None, :], mask=keep, other=0.0).to(tl.float32)
                    part = tl.sum(g * x, axis=0)  # (BLOCK_C,)
                    dw += tl.where(taps[None, :] == s, part[:, None], 0.0)
        tl.store(DU + base + t[:, None] * C + c[None, :], du.to(DU.dtype.element_ty),
                 mask=(t < T)[:, None] & cm[None, :])
    program = b * tl.num_programs(0) + j
    tl.store(DWP + program * C * S + c[:, None] * S + taps[None, :], dw, mask=cm[:, None] & (taps < S)[None, :])


def _blocks() -> tuple[int, int]:
    """(rows, channels) per tile: small under the interpreter (CPU tests)."""
    return (16, 16) if launch.interpreted() else (32, 64)


def _checked(u: Tensor, weight: Tensor) -> tuple[int, int, int, int]:
    B, T, C = u.shape
    S = weight.shape[1]
    if weight.shape[0] != C:
        raise ValueError(f"the conv's weight is {tuple(weight.shape)}; the input has {C} channels")
    if u.dtype not in DTYPES:
        raise ValueError(f"the causal conv kernel takes {', '.join(map(str, DTYPES))}; got {u.dtype}")
    if not 1 <= S <= CONV_MAX_TAPS:  # the taps are unrolled (tl.static_range)
        raise ValueError(f"the causal conv kernel takes 1 to {CONV_MAX_TAPS} taps; got {S}")
    if u.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("the causal conv kernel runs on CUDA (or under TRITON_INTERPRET=1)")
    return B, T, C, S


def forward(u: Tensor, weight: Tensor) -> Tensor:
    """y (B, T, C) in u's dtype; u and weight contiguous."""
    B, T, C, S = _checked(u, weight)
    y = torch.empty_like(u)
    BT, BC = _blocks()
    _forward[(triton.cdiv(T, BT), triton.cdiv(C, BC), B)](u, weight, y, T, C, S=S, BLOCK_T=BT, BLOCK_C=BC,
                                                         num_warps=4)
    return y


SPAN = 256  # rows per backward program: dw's partial sums are (B * T / SPAN, C, S) floats


def backward(u: Tensor, weight: Tensor, dy: Tensor) -> tuple[Tensor, Tensor]:
    """(du in u's dtype, dw in weight's dtype); all three contiguous."""
    B, T, C, S = _checked(u, weight)
    BT, BC = _blocks()
    span = max(BT, SPAN if not launch.interpreted() else 2 * BT)
    spans = triton.cdiv(T, span)
    du = torch.empty_like(u)
    parts = torch.empty(B * spans, C, S, dtype=torch.float32, device=u.device)
    _backward[(spans, triton.cdiv(C, BC), B)](u, weight, dy, du, parts, T, C, span, S=S, S_POW2=triton.next_power_of_2(S),
                                             BLOCK_T=BT, BLOCK_C=BC, num_warps=4)
    return du, parts.sum(0).to(weight.dtype)


@custom_op("causal_conv_silu")
def _conv(u: Tensor, weight: Tensor) -> Tensor:
    return forward(u, weight)


@_conv.register_fake
def _(u, weight):
    return torch.empty_like(u)


@custom_op("causal_conv_silu_backward")
def _conv_backward(u: Tensor, weight: Tensor, dy: Tensor) -> tuple[Tensor, Tensor]:
    return backward(u, weight, dy)


@_conv_backward.register_fake
def _(u, weight, dy):
    return torch.empty_like(u), torch.empty_like(weight)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward_rule(ctx, dy):
    u, weight = ctx.saved_tensors
    return _conv_backward(u, weight, dy.contiguous())


_conv.register_autograd(_backward_rule, setup_context=_setup_context)


def causal_conv_silu(u: Tensor, weight: Tensor) -> Tensor:
    """silu(causal depthwise conv of u from position 0), differentiable in u and weight:
    `seqdsl/reference/conv.py: causal_conv_silu` without a past, on the kernels."""
    return _conv(u.contiguous(), weight.contiguous())
