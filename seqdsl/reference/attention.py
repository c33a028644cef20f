"""Reference (oracle) for the softmax-attention family: scores, visibility, weights, RoPE, ALiBi.

Shape legend
    B   batch                     T   sequence length (self-attention: queries = keys = T)
    H   heads                     Dk  query/key head dim        Dv  value head dim
    q, k    (B, T, H, Dk)         v   (B, T, H, Dv)             output  (B, T, H, Dv)
    scores, weights, masks: (B, H, T, T) or (T, T), indexed [..., i, j] = (query i, key j)
    bias    (H, T, T)             alibi slopes  (H,)

The math (docs/design.md §2, §4), numbered as in the code:

    (1) s_ij = (q_i . k_j) * scale  [- slope_h * (i - j)]  [+ bias_h,ij]
    (2) visible(i, j) = j <= i  [and (i - w < j  [or j < sink])]  [and j // c == i // c]
    (3) w_ij = softmax_j(s_ij / temperature)          over visible j       ("softmax")
            = s_ij                                    on visible j, else 0 ("linear")
            = s_ij / sum_{visible l} s_il             on visible j, else 0 ("normalized_linear")
    (4) o_i  = sum_j w_ij v_j

Everything is materialised as a (T, T) matrix: slow and obvious on purpose. Works for float32 and
float64, on any device, and is differentiable through plain torch ops (no custom autograd).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from seqdsl.ir import schedules

WeightsKind = Literal["softmax", "linear", "normalized_linear"]

_NEG_INF = float("-inf")


def visibility_mask(
    T: int, *, window: int | None = None, chunk_local: int | None = None, device=None,
    offset: int = 0, keys: int | None = None, sink: int = 0,
) -> Tensor:
    """(T, L) bool: True where query i may see key j (step (2) of the module docstring), for
    queries at positions offset..offset+T-1 and keys 0..L-1 (L = keys, default T; decoding
    with a cache asks for the last rows of the square mask). `sink`: the first `sink` tokens
    stay visible to every later query whatever the window."""
    i = torch.arange(offset, offset + T, device=device)[:, None]
    j = torch.arange(T if keys is None else keys, device=device)[None, :]
    # (2a) causal: a query never sees a later token; it always sees itself, so no row is empty.
    mask = j <= i
    # (2b) sliding window of `window` tokens, the query included.
    if window is not None:
        if window <= 0:
            raise ValueError(f"window must be positive, got {window}")
        mask = mask & (j > i - window)
    # (2b') attention sinks: the first `sink` tokens, causally, besides the window.
    if sink < 0:
        raise ValueError(f"sink must be non-negative, got {sink}")
    if sink:
        if window is None:
            raise ValueError("sink tokens are defined with a window (under full visibility every token is visible)")
        mask = mask | ((j < sink) & (j <= i))
    # (2c) chunk-local: only keys of the query's own chunk of `chunk_local` tokens.
    if chunk_local is not None:
        if chunk_local <= 0:
            raise ValueError(f"chunk_local must be positive, got {chunk_local}")
        mask = mask & (j // chunk_local == i // chunk_local)
    return mask


def repeat_heads(x: Tensor, heads: int) -> Tensor:
    """(B, T, G, D) -> (B, T, heads, D) for heads shared in groups (grouped-query attention's
    key/value heads, Mamba's query/key groups): group g serves the heads/G consecutive heads
    g*heads/G..(g+1)*heads/G - 1."""
    groups = x.shape[2]
    if heads % groups:
        raise ValueError(f"{groups} shared heads cannot serve {heads} heads")
    return x if groups == heads else x.repeat_interleave(heads // groups, dim=2)


def alibi_slopes(heads: int, *, dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    """(H,) the ALiBi head slopes of Press et al. (2022); see seqdsl.ir.schedules.alibi_slopes."""
    return torch.tensor(schedules.alibi_slopes(heads), dtype=dtype, device=device)


def bias_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype additive score biases are computed in for scores of `dtype`: float64 stays
    float64 (a float64 model is the oracle of the others), everything else is float32 (bf16
    cannot count past 256, and decay sums need the digits)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def alibi_bias(slopes: Tensor, T: int, *, offset: int = 0, keys: int | None = None) -> Tensor:
    """(H, T, L) the ALiBi penalty -slope_h * (i - j) for queries at positions offset..offset+T-1
    and keys 0..L-1 (L = keys, default T): zero on the diagonal, more negative the further back
    the key is. Entries with j > i are positive but always masked by causality. Computed in
    `bias_dtype(slopes.dtype)`, returned in the slopes' dtype."""
    work = bias_dtype(slopes.dtype)
    i = torch.arange(offset, offset + T, device=slopes.device, dtype=work)
    j = torch.arange(T if keys is None else keys, device=slopes.device, dtype=work)
    return (-slopes.to(work)[:, None, None] * (i[:, None] - j[None, :])).to(slopes.dtype)


def attention_scores(
    q: Tensor,
    k: Tensor,
    *,
    scale: float,
    alibi_slopes: Tensor | None = None,
    bias: Tensor | None = None,
    shared_key: bool = False,
) -> Tensor:
    """(B, H, T, T) raw scores s_ij (step (1)), before masking and temperature. `shared_key`:
    every key is the same vector (`relation = const_keys`), k[:, 0]; each query is scored once
    and the score repeated over the keys, so their ties are exact (a blocked matrix product may
    round one column of identical keys differently: MKL did in float64 on an AMD EPYC, and a
    top-1 selection then picked key 12 instead of key 0)."""
    T = q.shape[1]
    # (1a) content relation: scaled dot product of query i with key j, per head.
    if shared_key:
        s = (torch.einsum("bihd,bhd->bhi", q, k[:, 0]) * scale)[..., None].expand(-1, -1, -1, k.shape[1])
    else:
        s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    # (1b) ALiBi: a fixed per-head linear distance penalty.
    if alibi_slopes is not None:
        s = s + alibi_bias(alibi_slopes.to(device=s.device, dtype=s.dtype), T)
    # (1c) an arbitrary additive bias (positional relation, tests); broadcast over the batch.
    if bias is not None:
        s = s + bias.to(device=s.device, dtype=s.dtype)
    return s


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.dim() != 4 or q.shape != k.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"expected q, k (B, T, H, Dk) and v (B, T, H, Dv); got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )


def attention_ref(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    weights: WeightsKind = "softmax",
    temperature: float = 1.0,
    window: int | None = None,
    chunk_local: int | None = None,
    alibi_slopes: Tensor | None = None,
    bias: Tensor | None = None,
    sink: int = 0,
) -> Tensor:
    """(B, T, H, Dv) causal attention with the given weights; see the module docstring.

    `temperature` only applies to softmax weights. `normalized_linear` divides by the row sum of
    the visible scores: the caller guarantees non-negative scores (a non-negative feature map) and
    a non-zero row sum; no epsilon is added, so the reference stays the exact formula."""
    _check_qkv(q, k, v)
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if weights != "softmax" and temperature != 1.0:
        raise ValueError(f"temperature applies to softmax weights only, not {weights!r}")
    T = q.shape[1]
    s = attention_scores(q, k, scale=scale, alibi_slopes=alibi_slopes, bias=bias)
    visible = visibility_mask(T, window=window, chunk_local=chunk_local, device=q.device, sink=sink)

    # (3) scores -> mixing weights. Invisible keys get weight exactly 0: -inf before the softmax,
    # 0 for the linear kinds (multiplying by the mask would turn an inf score into nan).
    if weights == "softmax":
        w = torch.softmax((s / temperature).masked_fill(~visible, _NEG_INF), dim=-1)
    elif weights == "linear":
        w = s.masked_fill(~visible, 0.0)
    elif weights == "normalized_linear":
        w = s.masked_fill(~visible, 0.0)
        w = w / w.sum(dim=-1, keepdim=True)
    else:
        raise ValueError(f"unknown weights {weights!r}")

    # (4) weighted sum of the values.
    return torch.einsum("bhij,bjhd->bihd", w, v)


def rope(x: Tensor, base: float = 10000.0, offset: int = 0) -> Tensor:
    """(B, T, H, D) rotary position embedding, rotate-half convention (GPT-NeoX / Llama).

    Channel m of the first half and channel m + D/2 form a pair that is rotated by the angle
    theta_{t,m} = t * base^(-2m / D) at position t = offset, ..., offset + T - 1:

        (x_m, x_{m+D/2}) -> (x_m cos - x_{m+D/2} sin,  x_{m+D/2} cos + x_m sin)

    Rotations are orthogonal (norms are kept) and compose additively, so after rope the product
    q_i . k_j depends on positions only through i - j. `offset` places a slice of the sequence at
    its true positions, as token-by-token decoding needs."""
    if x.dim() != 4:
        raise ValueError(f"expected x (B, T, H, D), got {tuple(x.shape)}")
    T, D = x.shape[1], x.shape[-1]
    if D % 2:
        raise ValueError(f"rope needs an even head dim, got {D}")
    half = D // 2
    # (1) frequencies and angles in float64: positions up to 1e5 times a frequency lose digits
    # in float32 before the cos/sin, which is what a reference must not do.
    inv_freq = base ** (-2.0 * torch.arange(half, dtype=torch.float64, device=x.device) / D)
    positions = torch.arange(offset, offset + T, dtype=torch.float64, device=x.device)
    theta = positions[:, None] * inv_freq[None, :]  # (T, D/2)
    # (2) cos/sin per channel, the same angle for both members of a pair; broadcast over B, H.
    cos = torch.cat([theta.cos(), theta.cos()], dim=-1).to(x.dtype)[None, :, None, :]
    sin = torch.cat([theta.sin(), theta.sin()], dim=-1).to(x.dtype)[None, :, None, :]
    # (3) rotate: x * cos + rotate_half(x) * sin, with rotate_half(x1, x2) = (-x2, x1).
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
