"""The depthwise causal convolution with SiLU of stage (1) (Mamba, Mamba-2, Based, DeltaNet) in one
Triton kernel forward and two backward, for calls from position 0 (training, prefill).

Shape legend: u, y, du (B, T, C), C channels contiguous; weight, dw (C, S), S taps.

    forward    y_t  = silu(a_t),  a_t = sum_s w_s u_(t+s-(S-1)),  u_(<0) = 0
    backward   g_t  = dy_t silu'(a_t)                       (a recomputed from u; g float32, pass 1)
               du_t = sum_s w_s g_(t+(S-1)-s)               (g_(>=T) = 0; pass 2)
               dw_s = sum_(b,t) g_t u_(t+s-(S-1))          (pass 1)

`seqdsl/reference/conv.py: causal_conv_silu` is the oracle. Under torch.compile the taps as
PyTorch ops become inductor's fused elementwise kernels and a reduction: 1.50 ms forward and
backward at Mamba-2's 110m shape (16 x 2048 tokens, 1,792 channels, 4 taps, bf16), against 1.17 ms
here (forward 0.39 against 0.22 ms; `benchmarks/bench_conv.py`, H200, 2026-11-28,
`benchmarks/results/conv_h200_2026-11-28/`), and the kernel is one opaque op in the compiled
graph. The taps are summed in float32 and y, du keep u's dtype; dw is reduced over the batch
and time in float32, per program then across programs in a fixed order (deterministic: no
atomics).

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
def _shifted(U, base, t, c, cm, T, C, shift):
    """u at rows t + shift of one sequence (0 outside 0..T-1), float32 (BLOCK_T, BLOCK_C)."""
    src = t + shift
    keep = ((src >= 0) & (src < T))[:, None] & cm[None, :]
    return tl.load(U + base + src[:, None] * C + c[None, :], mask=keep, other=0.0).to(tl.float32)


@triton.jit
def _preactivation(U, W, base, t, c, cm, T, C, S: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """a_t = sum_s w_s u_(t+s-(S-1)) for rows t and channels c, float32."""
    a = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
    for s in tl.static_range(S):
        w = tl.load(W + c * S + s, mask=cm, other=0.0).to(tl.float32)
        a += _shifted(U, base, t, c, cm, T, C, s - (S - 1)) * w[None, :]
    return a


@triton.jit
def _forward(U, W, Y, T, C, S: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    b = tl.program_id(2).to(tl.int64)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = c < C
    base = b * T * C
    a = _preactivation(U, W, base, t, c, cm, T, C, S, BLOCK_T, BLOCK_C)
    y = a * tl.sigmoid(a)
    tl.store(Y + base + t[:, None] * C + c[None, :], y.to(Y.dtype.element_ty), mask=(t < T)[:, None] & cm[None, :])


@triton.jit
def _gate_backward(U, W, DY, G, DWP, T, C, SPAN, S: tl.constexpr, S_POW2: tl.constexpr, BLOCK_T: tl.constexpr,
                   BLOCK_C: tl.constexpr):
    """g = dy silu'(a) (float32) and dw's share of program (j, cb, b), which owns rows
    j*SPAN .. (j+1)*SPAN-1 of sequence b and one block of channels: dw reads the shifted inputs
    a read just before (cache hits). dw's share goes to DWP[b * n_spans + j]."""
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
        inside = (t < T)[:, None] & cm[None, :]
        a = _preactivation(U, W, base, t, c, cm, T, C, S, BLOCK_T, BLOCK_C)
        dy = tl.load(DY + base + t[:, None] * C + c[None, :], mask=inside, other=0.0).to(tl.float32)
        sig = tl.sigmoid(a)
        g = dy * sig * (1.0 + a * (1.0 - sig))
        tl.store(G + base + t[:, None] * C + c[None, :], g, mask=inside)
        for s in tl.static_range(S):
            x = _shifted(U, base, t, c, cm, T, C, s - (S - 1))
            dw += tl.where(taps[None, :] == s, tl.sum(g * x, axis=0)[:, None], 0.0)
    program = b * tl.num_programs(0) + j
    tl.store(DWP + program * C * S + c[:, None] * S + taps[None, :], dw, mask=cm[:, None] & (taps < S)[None, :])


@triton.jit
def _input_backward(G, W, DU, T, C, S: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """du_t = sum_s w_s g_(t+(S-1)-s): the forward's taps, reversed, over g."""
    b = tl.program_id(2).to(tl.int64)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = c < C
    base = b * T * C
    du = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
    for s in tl.static_range(S):
        src = t + (S - 1 - s)
        w = tl.load(W + c * S + s, mask=cm, other=0.0).to(tl.float32)
        du += tl.load(G + base + src[:, None] * C + c[None, :], mask=(src < T)[:, None] & cm[None, :],
                      other=0.0) * w[None, :]
    tl.store(DU + base + t[:, None] * C + c[None, :], du.to(DU.dtype.element_ty), mask=(t < T)[:, None] & cm[None, :])


def _config(site: str) -> dict:
    """Tiles and launch options of `site` ("conv.fwd", "conv.bwd"): small under the interpreter
    (CPU tests), else these defaults or SEQDSL_TOP1_TILES's (kernels/launch.py)."""
    if launch.interpreted():
        return {"BLOCK_T": 16, "BLOCK_C": 16, "SPAN": 32, "num_warps": 1}
    # conv.fwd and conv.bwd: the fastest of bench_conv.py's sweeps at Mamba-2's 16 x 2048 x 1792
    # (H200, 2026-11-28; benchmarks/results/conv_h200_2026-11-28/)
    defaults = {"conv.fwd": {"BLOCK_T": 64, "BLOCK_C": 128, "num_warps": 4},
                "conv.bwd": {"BLOCK_T": 64, "BLOCK_C": 128, "SPAN": 512, "num_warps": 4},
                "conv.bwd_du": {"BLOCK_T": 64, "BLOCK_C": 128, "num_warps": 4}}
    return launch.tuned(site, defaults[site])


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
    cfg = _config("conv.fwd")
    _launch(_forward, (triton.cdiv(T, cfg["BLOCK_T"]), triton.cdiv(C, cfg["BLOCK_C"]), B), u, weight, y, T, C,
            cfg=cfg, S=S)
    return y


def _launch(kernel, grid, *args, cfg: dict, **constants) -> None:
    options = {"num_warps": cfg["num_warps"], **({"num_stages": cfg["num_stages"]} if "num_stages" in cfg else {})}
    kernel[grid](*args, BLOCK_T=cfg["BLOCK_T"], BLOCK_C=cfg["BLOCK_C"], **constants, **options)


def backward(u: Tensor, weight: Tensor, dy: Tensor) -> tuple[Tensor, Tensor]:
    """(du in u's dtype, dw in weight's dtype); all three contiguous. Two passes: g and dw, then
    du from g (g in float32, B x T x C, between them). One pass that recomputed a at the S
    positions each du reads took 1.38 ms at Mamba-2's shape, against 1.18 ms for inductor's
    kernels of the reference (bench_conv.py, H200, 2026-11-28)."""
    B, T, C, S = _checked(u, weight)
    cfg = _config("conv.bwd")
    spans = triton.cdiv(T, cfg["SPAN"])  # dw's partial sums: (B * T / SPAN, C, S)
    g = torch.empty(B, T, C, dtype=torch.float32, device=u.device)
    parts = torch.empty(B * spans, C, S, dtype=torch.float32, device=u.device)
    _launch(_gate_backward, (spans, triton.cdiv(C, cfg["BLOCK_C"]), B), u, weight, dy, g, parts, T, C, cfg["SPAN"],
            cfg=cfg, S=S, S_POW2=triton.next_power_of_2(S))
    du = torch.empty_like(u)
    cfg = _config("conv.bwd_du")
    _launch(_input_backward, (triton.cdiv(T, cfg["BLOCK_T"]), triton.cdiv(C, cfg["BLOCK_C"]), B), g, weight, du, T, C,
            cfg=cfg, S=S)
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
