"""What stage (3) of a mixer receives: the typed inputs every backend runs on.

Shape legend: B batch, T new tokens, L tokens so far, H heads, F key feature dim, Dv value dim,
Gk key heads and K value heads as the mixer stores them (grouped-query attention: K = Gk < H;
Mamba-style query/key groups: Gk < K = H).

Their own module, below the planner and every backend: the mixer builds them, the planner
(seqdsl/lower/paths.py) hands them on, the backends (seqdsl/lower/backends/) read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class AttentionInputs:
    """Softmax and select families. Queries sit at positions pos..pos+T-1; keys at 0..L-1
    (the cache included). Keys and values come with their shared heads as cached, never
    repeated by the caller: SDPA reads the groups itself (`enable_gqa`)."""

    q: Tensor  # (B, T, H, Dk) after rope / qk-norm
    k: Tensor  # (B, L, Gk, Dk)
    v: Tensor  # (B, L, K, Dv)
    pos: int = 0
    bias: Tensor | None = None  # additive score bias of the T queries' rows, (H or B,H, T, L)
    alibi: Tensor | None = None  # (H,) ALiBi slopes


@dataclass
class RecurrentInputs:
    """Recurrent family, already in the reference's conventions (q scaled, keys normalised for
    delta rules, a normaliser column appended to v for normalized_linear weights)."""

    q: Tensor  # (B, T, H, F)
    k: Tensor  # (B, T, H, F)
    v: Tensor  # (B, T, H, value_cols)
    log_decay: Tensor | None = None  # (B, T, H) or (B, T, H, F), as key.decay_shape says
    # decay_shape "selective" (Mamba-1): the step size (B, T, H) > 0 and the rate (H, F) < 0, the
    # log decay being dt x rate and the write dt k v^T; log_decay then holds only an extra
    # per-head decay (ALiBi), or None
    dt: Tensor | None = None
    rate: Tensor | None = None
    beta: Tensor | None = None  # (B, T, H) delta rules
    bonus: Tensor | None = None  # (H, F) RWKV-6's bonus u
    a: Tensor | None = None  # (B, T, H, F) RWKV-7's in-context rate
    kappa: Tensor | None = None  # (B, T, H, F) RWKV-7's removal key
