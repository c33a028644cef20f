"""Reference (oracle) for the recurrent / linear-weights family, in three equal forms.

Shape legend
    B  batch     T  sequence length     H  heads     Dk  key (state row) dim     Dv  value dim
    q, k             (B, T, H, Dk)     already feature-mapped and scaled by the caller
    v                (B, T, H, Dv)     Dv may be 1 (Mamba-1: one head per channel)
    log_decay        (B, T, H) one scalar per head, or (B, T, H, Dk) one per key channel
    dt, rate         (B, T, H), (H, Dk) Mamba-1's selective step: `selective_to_additive`
    beta             (B, T, H)         delta-rule writing strength
    bonus            (H, Dk)           RWKV-6's u
    a, kappa         (B, T, H, Dk)     RWKV-7's in-context rate and removal key
    state S          (B, H, Dk, Dv)    output o  (B, T, H, Dv)
    inside: head-first (B, H, T, D); chunked: (B, H, N, C, D), N chunks of C steps

The math, numbered as in the code. decay_t = exp(log_decay_t) scales the rows of S (a scalar
decay scales all rows alike); the log form keeps decay exactly in (0, 1] and turns products of
decays into sums, which the chunked and parallel forms need.

    (1) additive   S_t = decay_t S_(t-1) + k_t v_t^T                    o_t = q_t^T S_t
        linear attention and Based (no decay), RetNet (constant), Mamba-2 / simple GLA (scalar),
        GLA and Mamba-1 (vector).
    (2) bonus      o_t = q_t^T (S_(t-1) + diag(u) k_t v_t^T)            S_t as in (1)
        RWKV-6. As in fla's `naive_recurrent_rwkv6`, the output reads the state *before* step t's
        decay is applied: token j < t reaches o_t through decay_(j+1) ... decay_(t-1), one decay
        fewer than in (1), and token t itself only through the bonus u.
    (3) delta      S'_t = decay_t S_(t-1)
                   S_t  = S'_t + beta_t k_t (v_t - S'_t^T k_t)^T = (I - beta_t k_t k_t^T) S'_t
                          + beta_t k_t v_t^T                            o_t = q_t^T S_t
        DeltaNet (no decay), Gated DeltaNet (scalar decay); k is L2-normalised by the caller.
    (4) rwkv7      S_t = decay_t S_(t-1) - (a_t * kappa_t) (kappa_t^T S_(t-1)) + k_t v_t^T
                                                                        o_t = q_t^T S_t
        RWKV-7's generalised delta rule, written in this file's (Dk, Dv) state layout: RWKV-7's
        paper writes wkv_t = wkv_(t-1) (diag(w_t) - kappa_t^T (a_t * kappa_t)) + v_t^T k_t for the
        transposed (Dv, Dk) state. Both the decay and the removal act on S_(t-1). In fla's dplr
        convention S_t = exp(gk_t) S_(t-1) + b_t (a_t^T S_(t-1)) + k_t v_t^T (`dplr_recurrence`,
        `chunk_rwkv7`, `fused_recurrent_rwkv7`) this is gk = log_decay, fla's a = -kappa and fla's
        b = kappa * a, exactly what fla's RWKV7 layer passes (`a=-kk, b=kk * a`). Below,
        read = -kappa (how the state is read) and write = kappa * a (where it is written back).

Mamba-1's selective step (`decay = data_dependent(selective)`) is rule (1) with
log decay_t = dt_t * rate (one step size dt_t > 0 per head and step, a rate < 0 per key channel)
and the write scaled by the step, S_t = decay_t S_(t-1) + dt_t k_t v_t^T, Mamba's discretised
input dt B x: `selective_to_additive` gives the three forms below those inputs.

Forms: `recurrent_ref` is the step-by-step loop, the definition. `chunked_ref` splits time into
chunks of C steps: inside a chunk everything is a decay-masked (C, C) matrix product, computed for
all chunks at once (the delta and rwkv7 rules first solve a unit-triangular system per chunk: the
WY / UT transform of the DeltaNet paper); across chunks only the state travels, in closed form
for the additive rules and one (Dk, Dk) product per chunk for the delta rules. It is the training
path where no fast kernel runs, written so that `torch.compile` traces it whole (no data-dependent
control flow, no per-step Python loop). `parallel_ref` (rule (1) only) is the quadratic form
o = (Q K^T . D) V. All three take an initial state and return the final one, so running two
halves with the state carried equals running the whole.

Numerics: every exp below is taken of a sum of log decays (each <= 0) over a run of steps, or of
the difference of two cumulative sums along one chunk taken so that the later one is subtracted
from the earlier, so every exponent is <= 0 and nothing overflows, whatever the sequence length.
(Folding decays into q * exp(G) and k * exp(-G) would overflow once the cumulative log decay
passes the dtype's exp range: ~88 in float32, ~709 in float64.) For vector decay the price is a
(c, c, Dk) tensor per sub-chunk of c = 16 steps in `chunked_ref` (a (C, C) matmul across
sub-chunks, split at their boundary), and (T, T, Dk) in `parallel_ref`, an oracle only.
"""

from __future__ import annotations

from typing import Callable, Literal

import torch
from torch import Tensor

UpdateKind = Literal["additive", "delta", "rwkv7"]
# `affine_states` or an equal function: (M, b, S0) -> the states, S[n+1] = M[n] S[n] + b[n]
StateWalk = Callable[[Tensor, Tensor, Tensor], Tensor]
UPDATES: tuple[str, ...] = ("additive", "delta", "rwkv7")


SUB_CHUNK = 16  # per-channel decay: the (c, c, Dk) decay tensor is built within sub-chunks of c steps


def _exp_masked(exponent: Tensor, keep: Tensor) -> Tensor:
    """exp(exponent) where `keep`, else 0. The mask is applied to the exponent (-inf) before exp,
    so excluded entries, whose exponent may be positive and huge, never reach exp: no overflow,
    and no inf * 0 = NaN in the backward pass."""
    return exponent.masked_fill(~keep, float("-inf")).exp()


def _causal(C: int, strict: bool, device: torch.device) -> Tensor:
    """(C, C) boolean: j <= i (j < i if strict)."""
    i = torch.arange(C, device=device)[:, None]
    j = torch.arange(C, device=device)[None, :]
    return j < i if strict else j <= i


def _sub_chunk(C: int) -> int:
    """The largest divisor of C that is at most SUB_CHUNK."""
    return max(d for d in range(1, min(C, SUB_CHUNK) + 1) if C % d == 0)


def _scores(x: Tensor, y: Tensor, gx: Tensor, gy: Tensor, *, strict: bool) -> Tensor:
    """A[..., i, j] = sum_d x_id y_jd exp(gx_id - gy_jd) for j <= i (j < i if strict), else 0.

    x, y (..., C, D); gx, gy (..., C, D) or (..., C, 1): cumulative log decays along the chunk,
    gy = G (up to and including step j) and gx = G or G - g (up to i or i - 1), so that
    gx_i <= gy_b <= gy_j whenever j <= b < i: every exponent below is <= 0."""
    C = x.shape[-2]
    if gx.shape[-1] == 1:  # scalar decay factors out of the dot product: one (C, C) matrix
        return (x @ y.transpose(-1, -2)) * _exp_masked(gx - gy.transpose(-1, -2), _causal(C, strict, x.device))
    c = _sub_chunk(C)
    if c == C:
        return _vector_block(x, y, gx, gy, strict)
    # Per-channel decay in sub-chunks of c steps (fla's secondary chunking in `chunk_gla`): the
    # (c, c, D) decay tensor only within each sub-chunk I (the diagonal blocks); a key j in an
    # earlier sub-chunk reaches query i through R_I = gy at the last step before sub-chunk I,
    # exp(gx_i - gy_j) = exp(gx_i - R_I) exp(R_I - gy_j), both exponents <= 0 (j < I c <= i),
    # so those blocks are one matmul. Memory per chunk: (C c + C^2 / c) D instead of C^2 D.
    n = C // c
    blocks = lambda t: t.unflatten(-2, (n, c))  # (..., C, D) -> (..., n, c, D)
    diag = _vector_block(blocks(x), blocks(y), blocks(gx), blocks(gy), strict)  # (..., n, c, c)
    last = gy[..., c - 1::c, :]  # (..., n, D): gy at the last step of each sub-chunk
    R = torch.cat([torch.zeros_like(last[..., :1, :]), last[..., :-1, :]], dim=-2)  # R_0 = 0: no keys before
    x_side = blocks(x) * (blocks(gx) - R.unsqueeze(-2)).exp()  # (..., n, c, D)
    before = (torch.arange(C, device=x.device)[None, :] < c * torch.arange(n, device=x.device)[:, None])
    y_side = y.unsqueeze(-3) * _exp_masked(R.unsqueeze(-2) - gy.unsqueeze(-3), before[..., None])  # (..., n, C, D)
    off = (x_side @ y_side.transpose(-1, -2)).unflatten(-1, (n, c))  # (..., n, c, n, c), zero for J >= I
    eye = torch.eye(n, dtype=x.dtype, device=x.device)[:, None, :, None]  # places block I at column block I
    return (off + diag.unsqueeze(-2) * eye).flatten(-2).flatten(-3, -2)


def _vector_block(x: Tensor, y: Tensor, gx: Tensor, gy: Tensor, strict: bool) -> Tensor:
    """`_scores` for per-channel decay through the whole (..., C, C, D) decay tensor. Written as a
    product and a sum, not an einsum: torch.compile fuses it into one reduction that never stores
    the (C, C, D) tensor (an einsum is lowered to a batched matmul of a materialised operand)."""
    decay = _exp_masked(gx.unsqueeze(-2) - gy.unsqueeze(-3), _causal(x.shape[-2], strict, x.device)[..., None])
    return (x.unsqueeze(-2) * y.unsqueeze(-3) * decay).sum(-1)


class _UnitLowerInverse(torch.autograd.Function):
    """T = L^-1 for unit lower-triangular L (..., C, C) (its diagonal and upper part are not read).

    Forward `_inverse_by_halves`; the backward is two matmuls, dL = -T^T dT T^T on the strictly
    lower part (from dT = -T dL T): solving for the two right-hand sides the delta rules need and
    letting autograd differentiate the solves costs four batched solves per layer and step (30 of
    the 178 ms of Gated DeltaNet's 110m training step, batch 16, on an H200, 2026-11-27)."""

    @staticmethod
    def forward(ctx, lhs: Tensor) -> Tensor:
        inverse = _inverse_by_halves(lhs)
        ctx.save_for_backward(inverse)
        return inverse

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (inverse,) = ctx.saved_tensors
        t = inverse.transpose(-1, -2)
        return -(t @ grad @ t).tril(-1)


def _unit_lower_inverse(lhs: Tensor) -> Tensor:
    return _UnitLowerInverse.apply(lhs)


BASE_SOLVE = 16  # blocks up to this size are inverted by one batched triangular solve


def _inverse_by_halves(lhs: Tensor) -> Tensor:
    """L^-1 for unit lower-triangular L (..., C, C), its diagonal and upper part not read:
    [[A, 0], [B, D]]^-1 = [[A^-1, 0], [-D^-1 B A^-1, D^-1]], the two halves inverted together
    (one call on twice the batch) down to blocks of BASE_SOLVE, then by a triangular solve. A
    solve of the whole chunk steps through its C rows in order: cuBLAS's batched solve took 7.5
    of the 178.7 ms of Gated DeltaNet's 110m training step (C = 64, batch 16, H100, 2026-11-27);
    here 16 rows in order, then two levels of batched products (under TF32, as every other
    product of the chunked form): one Gated DeltaNet layer's forward and backward 6.94 to 6.57 ms
    and 6.98 to 6.74 ms in a second call (110m, batch 16 x 2048, CUDA graphs, H200, 2026-11-27,
    `benchmarks/bench_recurrent.py --earlier`)."""
    C = lhs.shape[-1]
    if C <= BASE_SOLVE:
        eye = torch.eye(C, dtype=lhs.dtype, device=lhs.device).expand_as(lhs)
        return torch.linalg.solve_triangular(lhs, eye, upper=False, unitriangular=True)
    h = C // 2
    upper_left, lower_right = lhs[..., :h, :h], lhs[..., h:, h:]
    if C == 2 * h:
        inv_ul, inv_lr = _inverse_by_halves(torch.stack([upper_left, lower_right])).unbind(0)
    else:  # halves of different sizes: one call each
        inv_ul, inv_lr = _inverse_by_halves(upper_left), _inverse_by_halves(lower_right)
    lower_left = -(inv_lr @ (lhs[..., h:, :h] @ inv_ul))
    top = torch.cat([inv_ul, inv_ul.new_zeros(*inv_ul.shape[:-1], C - h)], dim=-1)
    return torch.cat([top, torch.cat([lower_left, inv_lr], dim=-1)], dim=-2)


def _chunk_segment_sums(log_decay: Tensor) -> Tensor:
    """(..., N, D) per-chunk log decays -> (..., N+1, N+1, D) with [n, m] = sum_{m <= p < n} l_p
    for m <= n and -inf above the diagonal. Each entry is summed from its own terms (all <= 0),
    not taken as a difference of running sums, which would cancel over long sequences."""
    N = log_decay.shape[-2]
    p = torch.arange(N, device=log_decay.device)[:, None]
    m = torch.arange(N + 1, device=log_decay.device)[None, :]
    terms = log_decay.unsqueeze(-2).expand(*log_decay.shape[:-1], N + 1, log_decay.shape[-1])
    partial = terms.masked_fill(~(p >= m)[..., None], 0.0).cumsum(-3)  # [p, m] = sum_{m <= p' <= p}
    seg = torch.cat([torch.zeros_like(partial[..., :1, :, :]), partial], dim=-3)  # [n, m]: p' < n
    n = torch.arange(N + 1, device=log_decay.device)[:, None]
    return seg.masked_fill(~(m <= n)[..., None], float("-inf"))


STATE_GROUP = 64  # chunks whose states are solved together in closed form (4096 steps at chunk 64)


def _pass_states(log_decay: Tensor, b: Tensor, S0: Tensor, low_rank: Tensor | None,
                 walk: StateWalk | None = None) -> Tensor:
    """The states entering every chunk and the final one: (..., N+1, Dk, Dv) from
    S_(n+1) = (diag(exp(log_decay_n)) + low_rank_n) S_n + b_n, S_0 = S0.

    log_decay (..., N, Dk or 1) the chunks' total log decays, b (..., N, Dk, Dv), S0 (..., Dk, Dv),
    low_rank (..., N, Dk, Dk) or None. Without the low-rank term (additive rules) the recurrence
    is solved in closed form, one batched product for STATE_GROUP chunks at a time (its weights
    grow as the square of the chunks solved together); with it (delta, rwkv7) one
    (Dk, Dk) x (Dk, Dv) product per chunk, in order. (A scan over the chunks' affine maps, ceil(log2
    N) steps of products batched over the chunks, was slower under CUDA graphs: 8.83 against 6.57
    ms for one Gated DeltaNet layer's forward and backward at 110m, batch 16 x 2048, TF32, H200,
    2026-11-27, `benchmarks/bench_recurrent.py --earlier`: its compositions cost Dk^3 per chunk
    and step, in TF32 GEMMs that ran at about 50 TFLOP/s.) `walk` replaces `affine_states`, the
    loop, by an equal function (seqdsl/kernels/state_pass.py: the loop in one kernel)."""
    if low_rank is None:
        states, S = [], S0
        for start in range(0, b.shape[-3], STATE_GROUP):
            group = _closed_form_states(log_decay[..., start:start + STATE_GROUP, :],
                                        b[..., start:start + STATE_GROUP, :, :], S)
            states.append(group[..., :-1, :, :])
            S = group[..., -1, :, :]
        return torch.cat([*states, S.unsqueeze(-3)], dim=-3)
    Dk = low_rank.shape[-1]
    decay = log_decay.exp().expand(*log_decay.shape[:-1], Dk)
    transition = low_rank + torch.diag_embed(decay)  # (..., N, Dk, Dk)
    return (walk or affine_states)(transition, b, S0)


def affine_states(M: Tensor, b: Tensor, S0: Tensor) -> Tensor:
    """(..., N+1, Dk, Dv): S[0] = S0, S[n+1] = M[n] S[n] + b[n], one product per chunk, in order.
    M (..., N, Dk, Dk), b (..., N, Dk, Dv), S0 (..., Dk, Dv)."""
    states = [S0]
    for n in range(b.shape[-3]):
        states.append(M[..., n, :, :] @ states[-1] + b[..., n, :, :])
    return torch.stack(states, dim=-3)


def _closed_form_states(log_decay: Tensor, b: Tensor, S0: Tensor) -> Tensor:
    """`_pass_states` without a low-rank term, all at once:
    S_n = sum_{m <= n} exp(sum_{m <= p < n} l_p) b'_m with b' = (S0, b_0, ..., b_(N-1))."""
    weights = _chunk_segment_sums(log_decay).exp()  # (..., N+1, N+1, Dk or 1)
    inputs = torch.cat([S0.unsqueeze(-3), b], dim=-3)  # (..., N+1, Dk, Dv)
    if weights.shape[-1] == 1:
        return (weights.squeeze(-1) @ inputs.flatten(-2)).unflatten(-1, inputs.shape[-2:])
    return torch.einsum("...nmk,...mkv->...nkv", weights, inputs)


def _prepare(q, k, v, log_decay, beta, update, bonus, a, kappa, initial_state):
    """Check arguments against the rule; return head-first tensors.

    Returns q, k (B, H, T, Dk), v (B, H, T, Dv), g (B, H, T, Dk or 1) log decay (zeros when
    None), beta (B, H, T, 1) or None, read, write (B, H, T, Dk) or None, S0 (B, H, Dk, Dv)."""
    if update not in UPDATES:
        raise ValueError(f"unknown update rule {update!r}; expected one of {UPDATES}")
    if q.ndim != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"expected q, k (B, T, H, Dk) and v (B, T, H, Dv); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    if bonus is not None and update != "additive":
        raise ValueError("bonus (RWKV-6's u) belongs to the additive rule")
    if (beta is None) != (update != "delta"):
        raise ValueError("beta is required by, and only by, the delta rule")
    if ((a is None) or (kappa is None)) != (update != "rwkv7") or (a is None) != (kappa is None):
        raise ValueError("a and kappa are required by, and only by, the rwkv7 rule")
    head_first = lambda x: x.transpose(1, 2)  # (B, T, H, ...) -> (B, H, T, ...)
    if log_decay is None:
        g = q.new_zeros(B, H, T, 1)  # decay 1: nothing is forgotten
    elif log_decay.shape == (B, T, H):
        g = head_first(log_decay).unsqueeze(-1)
    elif log_decay.shape == (B, T, H, Dk):
        g = head_first(log_decay)
    else:
        raise ValueError(f"log_decay must be (B, T, H) or (B, T, H, Dk); "
                         f"got {tuple(log_decay.shape)}")
    if beta is not None:
        beta = head_first(beta).unsqueeze(-1)
    read = write = None
    if update == "rwkv7":
        read, write = head_first(-kappa), head_first(kappa * a)  # fla's dplr a and b, see (4)
    if initial_state is None:
        S0 = q.new_zeros(B, H, Dk, Dv)
    elif initial_state.shape == (B, H, Dk, Dv):
        S0 = initial_state.to(q.dtype)
    else:
        raise ValueError(f"initial_state must be (B, H, Dk, Dv); got {tuple(initial_state.shape)}")
    return head_first(q), head_first(k), head_first(v), g, beta, read, write, S0


def selective_to_additive(dt: Tensor, rate: Tensor, v: Tensor,
                          extra_log_decay: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Mamba-1's selective step as rule (1)'s inputs: (log decay (B, T, H, Dk) = dt x rate, plus
    `extra_log_decay` (B, T, H) per head if given (ALiBi's penalty); values dt_t v_t (B, T, H, Dv),
    the write scaled by the step). dt (B, T, H) > 0, rate (H, Dk) < 0."""
    log_decay = dt[..., None] * rate
    if extra_log_decay is not None:
        log_decay = log_decay + extra_log_decay[..., None]
    return log_decay, v * dt[..., None]


def recurrent_ref(
    q: Tensor, k: Tensor, v: Tensor, *,
    log_decay: Tensor | None = None,
    beta: Tensor | None = None,
    update: UpdateKind = "additive",
    bonus: Tensor | None = None,
    a: Tensor | None = None,
    kappa: Tensor | None = None,
    initial_state: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The definition: one step at a time. Returns (o (B, T, H, Dv), final state (B, H, Dk, Dv)).

    update = "additive" (rule (1), or (2) with `bonus`), "delta" (rule (3), needs `beta`) or
    "rwkv7" (rule (4), needs `a`, `kappa` and normally a vector `log_decay`)."""
    q, k, v, g, beta, read, write, S = _prepare(
        q, k, v, log_decay, beta, update, bonus, a, kappa, initial_state)
    outer = lambda x, y: x.unsqueeze(-1) * y.unsqueeze(-2)  # (B,H,Dk) x (B,H,Dv) -> (B,H,Dk,Dv)
    read_out = lambda x, S: torch.einsum("bhk,bhkv->bhv", x, S)  # x^T S
    outs = []
    for t in range(q.shape[2]):
        q_t, k_t, v_t = q[:, :, t], k[:, :, t], v[:, :, t]
        decay_t = g[:, :, t].exp().unsqueeze(-1)  # (B, H, Dk or 1, 1): scales the rows of S
        if update == "additive" and bonus is None:
            S = decay_t * S + outer(k_t, v_t)  # (1)
            outs.append(read_out(q_t, S))
        elif update == "additive":
            # (2) read S_(t-1) plus the current token through the bonus, then decay and write.
            outs.append(read_out(q_t, S + outer(bonus * k_t, v_t)))
            S = decay_t * S + outer(k_t, v_t)
        elif update == "delta":
            S = decay_t * S  # (3) S'_t
            u_t = beta[:, :, t] * (v_t - read_out(k_t, S))  # what S'_t mispredicts for k_t
            S = S + outer(k_t, u_t)
            outs.append(read_out(q_t, S))
        else:
            # (4) the removal reads S_(t-1), before the decay: both act on the previous state.
            removed = outer(write[:, :, t], read_out(read[:, :, t], S))
            S = decay_t * S + removed + outer(k_t, v_t)
            outs.append(read_out(q_t, S))
    return torch.stack(outs, dim=1), S


def chunked_ref(
    q: Tensor, k: Tensor, v: Tensor, *,
    log_decay: Tensor | None = None,
    beta: Tensor | None = None,
    update: UpdateKind = "additive",
    bonus: Tensor | None = None,
    a: Tensor | None = None,
    kappa: Tensor | None = None,
    initial_state: Tensor | None = None,
    chunk_size: int = 64,
    walk: StateWalk | None = None,
    products: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """Chunk-parallel form of `recurrent_ref`, same arguments and results; any chunk_size >= 1.
    `walk`: what runs the delta and rwkv7 rules' products of (C4), `affine_states` by default.
    `products` (delta rule only): a lower precision (bf16) for the chunk products' operands and
    results, as fla's chunk kernels take them; the cumulative decays, the scores the chunk
    inverse is taken of, the inverse itself and the states passed stay in the inputs' dtype.
    None (the oracle): every product in the inputs' dtype.

    Within chunk n, with G_i = sum of log decays of the chunk's steps up to and including i and
    Gx_i = G_i - g_i (up to i - 1), S_n the state entering the chunk:
      (C1) intra-chunk scores, all chunks at once: A_ij = q_i . (k_j * exp(G_i - G_j)), j <= i
           (per-channel decay: in sub-chunks of SUB_CHUNK steps, see `_scores`);
      (C2) delta / rwkv7: the values actually written, u = U0 -/+ W S_n, from one unit-triangular
           solve per chunk (the WY / UT transform), all chunks at once;
      (C3) every chunk is then affine in its entering state: o = Q S_n + O and
           S_(n+1) = (exp(G_last) + L) S_n + b, with Q, O, L, b computed for all chunks at once;
      (C4) the states S_n: in closed form for the additive rules, one (Dk, Dk) product per chunk
           for the delta rules (`_pass_states`); then every output at once.
    No step of the sequence is taken one at a time, and nothing (T, T)-sized is built."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if products is not None and update != "delta":
        raise ValueError(f"lower-precision products are written for the delta rule only, not {update!r}")
    q, k, v, g, beta, read, write, S0 = _prepare(
        q, k, v, log_decay, beta, update, bonus, a, kappa, initial_state)
    B, H, T, _ = q.shape
    C = chunk_size
    N = -(-T // C)
    # (C0) pad T up to N * C with zeros. A padded step has k = v = 0, log decay 0 (decay 1),
    # beta = 0 and read = write = 0, so it leaves the state unchanged; its outputs are dropped.
    split = lambda x: None if x is None else torch.nn.functional.pad(
        x, (0, 0, 0, N * C - T)).unflatten(2, (N, C))  # (B, H, T, D) -> (B, H, N, C, D)
    q, k, v, g, beta, read, write = map(split, (q, k, v, g, beta, read, write))
    G = g.cumsum(-2)
    Gx = G - g
    G_last = G[..., -1:, :]  # (B, H, N, 1, Dk or 1)
    k_out = (k * (G_last - G).exp()).transpose(-1, -2)  # (B, H, N, Dk, C): k_j's path to the chunk's end
    eye = torch.eye(C, dtype=q.dtype, device=q.device)

    low = (lambda t: t) if products is None else (lambda t: t.to(products))

    # (C1) intra-chunk scores, and the query's view of the chunk's initial state.
    if bonus is None:
        A_qk, q_in = _scores(low(q), low(k), G, G, strict=False), q * G.exp()
    else:
        # (2): strictly earlier keys with one decay fewer, plus the diagonal through the bonus.
        own = (q * bonus[:, None, None, :] * k).sum(-1)  # (B, H, N, C)
        A_qk, q_in = _scores(q, k, Gx, G, strict=True) + torch.diag_embed(own), q * Gx.exp()

    # (C2, C3) the written values and each chunk's affine map. delta: u_t = beta_t (v_t - k_t^T S'_t);
    # expanding S'_t over the chunk gives (I + A) u = beta (v - (k * exp(G)) S0), A_tj = beta_t k_t .
    # (k_j exp(G_t - G_j)) for j < t. rwkv7: u_t = read_t^T S_(t-1) gives (I - A_rw) u = A_rk v +
    # (read * exp(Gx)) S0. Solving once for U0 and W (S0 enters linearly) leaves u = U0 -/+ W S_n.
    low_rank = None  # the state-dependent part of the transition besides the decay
    if update == "additive":
        Q, O, b = q_in, A_qk @ v, k_out @ v
    elif update == "delta":
        lhs = eye + beta * _scores(k, k, G, G, strict=True)
        solve = low(_unit_lower_inverse(lhs))  # (B, H, N, C, C): one inverse for both right-hand sides
        U0, W = solve @ low(beta * v), solve @ low(beta * k * G.exp())
        # o = q_in S + A_qk (U0 - W S);  S' = exp(G_last) S + k_out (U0 - W S). (Each left factor
        # times [U0 | W] at once, three products of twice the width, was 2% slower in the compiled
        # layer: 7.84 against 7.70 ms, H100, 2026-11-28, benchmarks/results/state_pass_gpu_2026-11-28/call4.)
        A_qk, k_out = low(A_qk), low(k_out)
        Q, O = low(q_in) - A_qk @ W, A_qk @ U0
        b, low_rank = (k_out @ U0).to(S0.dtype), -(k_out @ W).to(S0.dtype)  # the states stay in S0's dtype
    else:
        lhs = eye - _scores(read, write, Gx, G, strict=True)
        A_rk = _scores(read, k, Gx, G, strict=True)
        solve = _unit_lower_inverse(lhs)
        U0, W = solve @ (A_rk @ v), solve @ (read * Gx.exp())
        A_qw = _scores(q, write, G, G, strict=False)
        write_out = (write * (G_last - G).exp()).transpose(-1, -2)  # (B, H, N, Dk, C)
        # o = q_in S + A_qk v + A_qw (U0 + W S);  S' = exp(G_last) S + k_out v + write_out (U0 + W S)
        Q, O = q_in + A_qw @ W, A_qk @ v + A_qw @ U0
        b, low_rank = k_out @ v + write_out @ U0, write_out @ W

    # (C4) only the state travels from chunk to chunk; then every chunk's output at once.
    states = _pass_states(G_last.squeeze(-2), b, S0, low_rank, walk)  # (B, H, N+1, Dk, Dv)
    o = (Q @ low(states[:, :, :N]) + O).flatten(2, 3)[:, :, :T]  # (B, H, T, Dv)
    return o.transpose(1, 2), states[:, :, N]


def parallel_ref(
    q: Tensor, k: Tensor, v: Tensor, *,
    log_decay: Tensor | None = None,
    initial_state: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Quadratic form of rule (1): o = (Q K^T . D) V, D_ij = prod_{j < s <= i} decay_s for j <= i.

    For vector decay D carries a key-channel axis, A_ij = sum_d q_id k_jd D_ijd; it is built from
    differences of cumulative log decays (never by folding exp(+-G) into q and k, which overflows),
    so it costs (B, H, T, T, Dk) memory. Returns (o (B, T, H, Dv), final state (B, H, Dk, Dv))."""
    q, k, v, g, _, _, _, S0 = _prepare(
        q, k, v, log_decay, None, "additive", None, None, None, initial_state)
    G = g.cumsum(-2)  # (P1) G_i = sum_{s <= i} log decay_s, so log D_ij = G_i - G_j
    G_last = G[..., -1:, :]
    A = _scores(q, k, G, G, strict=False)  # (P2) A_ij = q_i . (k_j * D_ij), causal
    o = A @ v + (q * G.exp()) @ S0  # (P3) plus the initial state, decayed up to step i
    S = G_last.exp().transpose(-1, -2) * S0 + (k * (G_last - G).exp()).transpose(-1, -2) @ v
    return o.transpose(1, 2), S
