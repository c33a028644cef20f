"""Mamba-2's discrete SSD, written from its published definition (Dao & Gu 2024, the SSD
recurrence of `ssd_minimal_discrete`), in mamba-ssm's own layout: a test-only oracle for the
mapping in seqdsl/lower/backends/mamba_ssd.py. It imports nothing from mamba-ssm.

Shape legend: b batch, l steps, h heads, g groups (each shared by h / g consecutive heads),
p head dim (mamba's x width), n state dim; c chunks of s steps.

    h_t = exp(A_t) h_(t-1) + X_t B_t^T        h (b, h, p, n)        y_t = h_t C_t

X is the already-discretised input (mamba's dt * x) and A the per-step log decay (mamba's dt * A).
`state_update` is the same recurrence for one step in the arguments of mamba's state-update kernel.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _per_head(t: Tensor, heads: int) -> Tensor:
    """(b, l, g, n) -> (b, l, h, n): group i serves heads i*h/g .. (i+1)*h/g - 1."""
    return t.repeat_interleave(heads // t.shape[2], dim=2)


def ssd_loop(X: Tensor, A: Tensor, B: Tensor, C: Tensor, initial_states: Tensor | None = None):
    """Step by step. Returns (y (b, l, h, p), final state (b, h, p, n))."""
    b, l, h, p = X.shape
    B, C = _per_head(B, h), _per_head(C, h)
    state = X.new_zeros(b, h, p, B.shape[-1]) if initial_states is None else initial_states
    ys = []
    for t in range(l):
        state = A[:, t, :, None, None].exp() * state + X[:, t, :, :, None] * B[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C[:, t]))
    return torch.stack(ys, dim=1), state


def ssd_chunked(X: Tensor, dA_cumsum: Tensor, dt: Tensor, B: Tensor, C: Tensor,
                initial_states: Tensor | None = None):
    """The chunked form on the tensors mamba-ssm's SSD kernels take: dA_cumsum (b, h, c, s) the
    within-chunk cumulative log decay and dt (b, h, c, s) the write scale (zero past the end).
    Returns (y (b, l, h, p), final state (b, h, p, n))."""
    b, l, h, p = X.shape
    _, _, c, s = dt.shape
    pad = lambda t: torch.nn.functional.pad(t, (0, 0, 0, 0, 0, c * s - l)).view(b, c, s, *t.shape[2:])
    Xc, Bc, Cc = pad(X), pad(_per_head(B, h)), pad(_per_head(C, h))  # (b, c, s, h, *)
    Xc = Xc * dt.permute(0, 2, 3, 1)[..., None]  # the write scale
    i = torch.arange(s)
    causal = i[:, None] >= i[None, :]
    seg = (dA_cumsum[..., :, None] - dA_cumsum[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    y_diag = torch.einsum("bcihn,bcjhn,bhcij,bcjhp->bcihp", Cc, Bc, seg, Xc)
    to_end = (dA_cumsum[..., -1:] - dA_cumsum).exp()  # (b, h, c, s)
    chunk_states = torch.einsum("bcjhn,bhcj,bcjhp->bchpn", Bc, to_end, Xc)
    state = X.new_zeros(b, h, p, B.shape[-1]) if initial_states is None else initial_states
    y_off = []
    for k in range(c):  # the state entering chunk k, read with the decay up to each step
        y_off.append(torch.einsum("bihn,bhpn,bhi->bihp", Cc[:, k], state, dA_cumsum[:, :, k].exp()))
        state = dA_cumsum[:, :, k, -1, None, None].exp() * state + chunk_states[:, k]
    y = (y_diag + torch.stack(y_off, dim=1)).reshape(b, c * s, h, p)[:, :l]
    return y, state


def state_update(state: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
                 D: Tensor | None = None, dt_bias: Tensor | None = None) -> Tensor:
    """One step of Mamba's selective state update (the recurrence its `selective_state_update`
    kernel computes for generation), from its definition, on the kernel's argument shapes:
    state (b, h, p, n) updated in place, x and dt (b, h, p), A (h, p, n), B and C (b, g, n),
    D and dt_bias (h, p). Returns y (b, h, p) in x's dtype; computes in the state's dtype, as the
    kernel computes in float32 on a float32 state.

        dt' = dt + dt_bias      state = exp(dt' A) * state + (dt' x) B^T      y = state C + D x
    """
    h, out_dtype = x.shape[1], x.dtype
    x, dt, A, B, C = (t.to(state.dtype) for t in (x, dt, A, B, C))
    dt = dt if dt_bias is None else dt + dt_bias.to(state.dtype)
    Bh, Ch = (t.repeat_interleave(h // t.shape[1], dim=1) for t in (B, C))  # (b, h, n)
    dA = (dt[..., None] * A).exp()  # (b, h, p, n)
    state.copy_(dA * state + dt[..., None] * x[..., None] * Bh[:, :, None, :])
    y = torch.einsum("bhpn,bhn->bhp", state, Ch)
    return (y if D is None else y + D.to(state.dtype) * x).to(out_dtype)
