"""A whole mixer, recomputed from its spec and its weights, for golden tests only.

`mixer_oracle(spec, weights, x, d_model)` computes what `MixerModule(spec, d_model)` with
`state_dict() == weights` must return for input x, written from the language reference
(grammar/README.md) and the gradient definitions in `seqdsl/reference/top1.py`'s docstring. It
shares no code with the lowering or with `seqdsl/reference/*`: its own projections, convolution
(a loop over taps), RoPE (one channel pair at a time), ALiBi slopes, masks, softmax and Top-k
selection (a loop over queries), decays, recurrences (a loop over time), norms, gates. It is
written for clarity, not speed: use it at T of a few dozen. Gradients come from autograd through
this independent forward, so comparing `module`'s gradients with the oracle's checks every
backward the lowering defines (the STE included: it is written here as documented).

Shape legend
    B batch   T tokens   D d_model   H heads   G query/key groups   Dk key dim   Dv head dim
    x (B, T, D)    q, k (B, T, H, Dk)    v (B, T, H, Dv)    s, weights (B, H, T, T)
    recurrent state S (B, H, Dk, Dv)

Feature maps: identity, elu1 and relu (taylor raises NotImplementedError).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.ir import nodes

sg = torch.Tensor.detach  # stop-gradient


def layout(spec: nodes.Mixer, d_model: int) -> tuple[int, int, int, int]:
    """(H, G, Dk, Dv) from the slot definitions: heads = expand * d_model / head_dim when auto."""
    Dv = spec.head_dim
    H = spec.expand * d_model // Dv if spec.heads == "auto" else spec.heads
    G = H if spec.qk_groups == "auto" else spec.qk_groups
    Dk = Dv if spec.key_dim == "auto" else spec.key_dim
    return H, G, Dk, Dv


def kv_heads(spec: nodes.Mixer, H: int) -> int:
    """K: value projections (and key projections, unless queries and keys are grouped), each
    serving H / K consecutive heads (grouped-query attention)."""
    return H if spec.kv_groups == "auto" else spec.kv_groups


def linear(x: Tensor, w: dict, name: str) -> Tensor:
    out = x @ w[f"{name}.weight"].T
    bias = w.get(f"{name}.bias")
    return out if bias is None else out + bias


def rms_norm(x: Tensor, weight: Tensor) -> Tensor:
    """RMSNorm over the last dim with torch's default eps (the dtype's machine epsilon)."""
    eps = torch.finfo(x.dtype).eps
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def rope_pairs(x: Tensor, base: float) -> Tensor:
    """Rotary embedding, rotate-half pairing: channel m pairs with m + D/2, angle t * base^(-2m/D)."""
    T, D = x.shape[1], x.shape[-1]
    half = D // 2
    t = torch.arange(T, dtype=torch.float64)[None, :, None]
    first, second = [], []
    for m in range(half):
        angle = t * base ** (-2.0 * m / D)
        a, b = x[..., m], x[..., m + half]
        first.append(a * torch.cos(angle) - b * torch.sin(angle))
        second.append(b * torch.cos(angle) + a * torch.sin(angle))
    return torch.stack(first + second, dim=-1)


def alibi_slopes_press(H: int) -> Tensor:
    """Press et al.'s slopes: for H a power of two, 2^(-8 h / H) for h = 1..H; otherwise those of
    the largest power of two P < H, then the odd-numbered slopes of 2P for the other H - P heads
    (the ALiBi paper's reference code)."""
    geometric = lambda n: [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]
    P = 1 << (H.bit_length() - 1)
    slopes = geometric(P) + geometric(2 * P)[0::2][: H - P]
    return torch.tensor(slopes, dtype=torch.float64)


def causal_conv_silu(u: Tensor, weight: Tensor) -> Tensor:
    """Depthwise causal conv, out_t = sum_s w[:, s] u_(t - size + 1 + s), zeros before t = 0."""
    size = weight.shape[1]
    out = torch.zeros_like(u)
    for s in range(size):
        lag = size - 1 - s
        shifted = F.pad(u, (0, 0, lag, 0))[:, : u.shape[1]]
        out = out + shifted * weight[:, s]
    return F.silu(out)


# --- (1) inputs ------------------------------------------------------------------------------------


def projections(spec: nodes.Mixer, w: dict, x: Tensor, d_model: int):
    """q, k (or None), v per head, after token shift / conv, before the relation's own steps."""
    B, T, _ = x.shape
    H, G, Dk, Dv = layout(spec, d_model)
    rel = spec.relation
    xq = xk = xv = x
    if isinstance(spec.conv, nodes.TokenShift):
        prev = F.pad(x, (0, 0, 1, 0))[:, :T]
        mu = w["shift_mix"]
        xq, xk, xv = (x + (prev - x) * mu[i] for i in range(3))
    parts = []
    uses_q, uses_k = not isinstance(rel, nodes.Positional), isinstance(rel, nodes.Dot)
    if uses_q:
        parts.append(linear(xq, w, "q_proj"))
    if uses_k:
        parts.append(linear(xk, w, "k_proj"))
    parts.append(linear(xv, w, "v_proj"))
    if isinstance(spec.conv, nodes.CausalConv):
        widths = [p.shape[-1] for p in parts]
        parts = list(causal_conv_silu(torch.cat(parts, -1), w["conv_weight"]).split(widths, -1))
    K = kv_heads(spec, H)

    def heads(u: Tensor, n: int, d: int) -> Tensor:  # n projections -> one per head (n | H)
        return u.reshape(B, T, n, 1, d).expand(B, T, n, H // n, d).reshape(B, T, H, d)

    v = heads(parts.pop(), K, Dv)
    q = heads(parts.pop(0), G, Dk) if uses_q else x.new_zeros(B, T, H, Dk)
    k = heads(parts.pop(0), min(G, K), Dk) if uses_k else None
    return q, k, v


def keys_and_position(spec: nodes.Mixer, w: dict, q: Tensor, k: Tensor | None):
    B, T, H, Dk = q.shape
    rel = spec.relation
    if isinstance(rel, nodes.RandomKeys):
        k = w["random_keys"][:T].expand(B, T, H, Dk)
    elif isinstance(rel, nodes.ConstKeys):
        k = w["const_key"].expand(B, T, H, Dk)
    elif k is None:
        k = torch.zeros_like(q)
    if isinstance(rel, nodes.Dot) and rel.qk_norm:
        q, k = rms_norm(q, w["q_norm.weight"]), rms_norm(k, w["k_norm.weight"])
    if isinstance(spec.position, nodes.Rope):
        q, k = rope_pairs(q, spec.position.base), rope_pairs(k, spec.position.base)
    feature = rel.feature if isinstance(rel, nodes.Dot) else "identity"
    if feature == "identity":
        return q, k
    # a feature map phi takes the scale inside: phi(q * scale) . phi(k)
    if rel.scale != "auto":
        q = q * rel.scale
    if feature == "elu1":  # elu(x) + 1: x + 1 above zero, exp(x) below
        phi = lambda u: torch.where(u > 0, u + 1.0, torch.exp(u.clamp(max=0)))
    elif feature == "relu":
        phi = lambda u: u.clamp(min=0)
    else:
        raise NotImplementedError(f"the oracle has no {feature!r} feature map")
    return phi(q), phi(k)


def qk_scale(spec: nodes.Mixer, Dk: int) -> float:
    rel = spec.relation
    if isinstance(rel, nodes.Dot) and rel.feature != "identity":
        return 1.0  # taken inside the feature map
    if isinstance(rel, nodes.Dot) and rel.scale != "auto":
        return float(rel.scale)
    return 1.0 / math.sqrt(Dk)


# --- (3a) the softmax family --------------------------------------------------------------------------


def softmax_scores(spec: nodes.Mixer, w: dict, q: Tensor, k: Tensor, x: Tensor, d_model: int):
    """(B, H, T, T) scores s_ij and the (T, T) visibility."""
    B, T, H, Dk = q.shape
    s = torch.einsum("bihd,bjhd->bhij", q, k) * qk_scale(spec, Dk)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    dist = (i - j).to(torch.float64)
    if isinstance(spec.position, nodes.Alibi):
        s = s - alibi_slopes_press(H)[:, None, None] * dist
    if isinstance(spec.relation, nodes.Positional):
        s = s + w["distance_bias"][:, (i - j).clamp(min=0)]
    if not isinstance(spec.decay, nodes.NoDecay):
        g = log_decays(spec, w, x, H, Dk, d_model)  # (B, T, H)
        G = g.cumsum(1).transpose(1, 2)  # (B, H, T)
        s = s + (G[..., :, None] - G[..., None, :])
    visible = j <= i
    vis = spec.visibility
    if isinstance(vis, nodes.Window):
        # within the window, or one of the first `sink` tokens (always kept, StreamingLLM)
        visible = visible & ((i - j < vis.size) | (j < vis.sink))
    elif isinstance(vis, nodes.ChunkLocal):
        visible = visible & (i // vis.size == j // vis.size)
    return s, visible


def masked_softmax(z: Tensor, keep: Tensor) -> Tensor:
    return torch.softmax(z.masked_fill(~keep, float("-inf")), dim=-1)


def top_elements(spec: nodes.Mixer, z: Tensor, visible: Tensor, v: Tensor) -> Tensor:
    """Top-k element selection, forward and STE exactly as `reference/top1.py` documents."""
    sel = spec.select
    B, H, T, _ = z.shape
    chosen = torch.zeros(B, H, T, T, dtype=torch.bool)
    for i in range(T):
        row = z[..., i, : i + 1].detach().masked_fill(~visible[i, : i + 1], float("-inf"))
        # a stable descending sort keeps equal scores in index order: ties go to the lowest index
        order = torch.sort(row, dim=-1, descending=True, stable=True).indices[..., : sel.k]
        chosen[..., i, :].scatter_(-1, order, True)
    chosen &= visible
    w_sel = masked_softmax(z, chosen)
    mix = lambda weights, values: torch.einsum("bhij,bjhd->bihd", weights, values)
    if sel.grad == "none":
        return mix(w_sel, v)
    p = masked_softmax(z, visible)
    if sel.value_grad == "hard":  # o = (p + sg(w_sel - p)) v
        return mix(p + sg(w_sel - p), v)
    soft = mix(p, v)  # o = p v + sg((w_sel - p) v)
    return soft + sg(mix(w_sel, v) - soft)


def top_chunks(spec: nodes.Mixer, s: Tensor, tau: float, v: Tensor) -> Tensor:
    """Top-k chunk selection, one query at a time: candidates, chunk scores, selection, one softmax
    over the attended keys (with the sink tokens), and the STE factor 1 + G - sg(G)."""
    sel = spec.select
    size = sel.over.size
    B, H, T, _ = s.shape
    outs = []
    for i in range(T):
        own = i // size
        candidates = list(range(own if sel.local else own + 1))
        scores = []
        for c in candidates:
            keys = s[..., i, c * size: min((c + 1) * size, i + 1)]  # visible keys of chunk c
            if sel.score == "max":
                scores.append(keys.max(-1).values)
            elif sel.score == "mean":
                scores.append(keys.mean(-1))
            else:
                scores.append(tau * torch.logsumexp(keys / tau, -1))
        attend = torch.zeros(B, H, T, dtype=torch.bool)
        factor = torch.ones(B, H, dtype=s.dtype)
        if candidates:
            cs = torch.stack(scores, -1)  # (B, H, n_candidates)
            best = torch.sort(cs.detach(), dim=-1, descending=True, stable=True).indices[..., : sel.k]
            picked = torch.zeros_like(cs, dtype=torch.bool).scatter(-1, best, True)
            for n, c in enumerate(candidates):
                attend[..., c * size: min((c + 1) * size, i + 1)] |= picked[..., n: n + 1]
            if sel.grad == "ste":
                g_mass = (torch.softmax(cs / tau, -1) * picked).sum(-1)
                factor = 1.0 + g_mass - sg(g_mass)
        if sel.local:
            attend[..., own * size: i + 1] = True
        attend[..., : min(sel.sink, i + 1)] = True  # the sink tokens, whatever was chosen
        weights = masked_softmax(s[..., i, :] / tau, attend)  # (B, H, T)
        o_i = torch.einsum("bhj,bjhd->bhd", weights, v) * factor[..., None]
        outs.append(o_i)
    return torch.stack(outs, dim=1)  # (B, T, H, Dv)


def softmax_mixing(spec, w, q, k, v, x, d_model) -> Tensor:
    s, visible = softmax_scores(spec, w, q, k, x, d_model)
    tau = spec.weights.temperature
    sel = spec.select
    if isinstance(sel, nodes.Top) and isinstance(sel.over, nodes.Chunk):
        return top_chunks(spec, s, tau, v)
    z = s / tau
    if isinstance(sel, nodes.Top):
        return top_elements(spec, z, visible, v)
    return torch.einsum("bhij,bjhd->bihd", masked_softmax(z, visible), v)


# --- (3b) the recurrent family ------------------------------------------------------------------------


def log_decays(spec: nodes.Mixer, w: dict, x: Tensor, H: int, Dk: int, d_model: int) -> Tensor | None:
    """(B, T, H) or (B, T, H, Dk) log decays, or None."""
    B, T, _ = x.shape
    decay = spec.decay
    if isinstance(decay, nodes.ConstantDecay):
        gammas = [1 - 2.0 ** (-5 - h) for h in range(H)] if decay.gamma == "auto" else [decay.gamma] * H
        return torch.log(torch.tensor(gammas, dtype=torch.float64)).expand(B, T, H)
    if isinstance(decay, nodes.DataDependentDecay) and decay.granularity == "scalar":
        return -torch.exp(w["A_log"]) * F.softplus(linear(x, w, "dt_proj"))  # Mamba-2
    if isinstance(decay, nodes.DataDependentDecay) and decay.granularity == "selective":
        return -step_sizes(w, x)[..., None] * torch.exp(w["rate_log"])  # Mamba-1: dt exp(A_log) per entry
    if isinstance(decay, nodes.DataDependentDecay):
        low = linear(x, w, "decay_down")
        return (F.logsigmoid(linear(low, w, "decay_up")) / 16.0).reshape(B, T, H, Dk)  # GLA
    return None


def step_sizes(w: dict, x: Tensor) -> Tensor:
    """(B, T, H) Mamba-1's step sizes dt = softplus(W_up W_down x + b) (low-rank, as dt_rank)."""
    return F.softplus(linear(linear(x, w, "dt_down"), w, "dt_up"))


def recurrent_mixing(spec, w, q, k, v, x, d_model) -> Tensor:
    """The recurrences of grammar/README.md, one step at a time."""
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    g = log_decays(spec, w, x, H, Dk, d_model)
    if isinstance(spec.position, nodes.Alibi):  # a constant extra decay e^-slope per head
        slope = alibi_slopes_press(H)
        extra = -slope.expand(B, T, H)
        g = extra if g is None else g + (extra if g.dim() == 3 else extra[..., None])
    if g is None:
        g = x.new_zeros(B, T, H)
    if g.dim() == 3:
        g = g[..., None].expand(B, T, H, Dk)
    if isinstance(spec.decay, nodes.DataDependentDecay) and spec.decay.granularity == "selective":
        v = v * step_sizes(w, x)[..., None]  # Mamba's discretised input dt B x: the write scaled by dt
    update = spec.update
    if isinstance(update, nodes.Delta):
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        beta = torch.sigmoid(linear(x, w, "beta_proj"))  # (B, T, H)
    if isinstance(update, nodes.Rwkv7):
        a = torch.sigmoid(linear(x, w, "a_proj")).reshape(B, T, H, Dk)
        kappa = F.normalize(k, dim=-1)
    q = q * qk_scale(spec, Dk)
    normalised = isinstance(spec.weights, nodes.NormalizedLinear)
    S = x.new_zeros(B, H, Dk, Dv)
    z = x.new_zeros(B, H, Dk)  # normaliser: sum of decayed keys
    outs = []
    for t in range(T):
        decay = torch.exp(g[:, t])[..., None]  # (B, H, Dk, 1): scales the rows of S
        q_t, k_t, v_t = q[:, t], k[:, t], v[:, t]
        read = lambda state: torch.einsum("bhk,bhkv->bhv", q_t, state)
        outer = lambda a_, b_: a_[..., :, None] * b_[..., None, :]
        if isinstance(update, nodes.Additive) and update.bonus:
            outs.append(read(S + outer(w["bonus"] * k_t, v_t)))  # RWKV-6 reads S_(t-1) + bonus
            S = decay * S + outer(k_t, v_t)
            continue
        if isinstance(update, nodes.Delta):
            S = decay * S
            predicted = torch.einsum("bhk,bhkv->bhv", k_t, S)
            S = S + outer(k_t, beta[:, t, :, None] * (v_t - predicted))
        elif isinstance(update, nodes.Rwkv7):
            removal = outer(kappa[:, t] * a[:, t], torch.einsum("bhk,bhkv->bhv", kappa[:, t], S))
            S = decay * S - removal + outer(k_t, v_t)
        else:
            S = decay * S + outer(k_t, v_t)
        o_t = read(S)
        if normalised:
            z = decay[..., 0] * z + k_t
            o_t = o_t / ((q_t * z).sum(-1, keepdim=True) + 1e-6)
        outs.append(o_t)
    return torch.stack(outs, dim=1)


# --- the whole mixer -----------------------------------------------------------------------------------


def mixer_oracle(spec: nodes.Mixer, weights: dict[str, Tensor], x: Tensor, d_model: int) -> Tensor:
    """(B, T, D) the mixer's output for x (positions 0..T-1), from `weights` (a state_dict)."""
    B, T, _ = x.shape
    H, G, Dk, Dv = layout(spec, d_model)
    q, k, v = projections(spec, weights, x, d_model)
    q, k = keys_and_position(spec, weights, q, k)
    if spec.is_recurrent:
        o = recurrent_mixing(spec, weights, q, k, v, x, d_model)
    else:
        o = softmax_mixing(spec, weights, q, k, v, x, d_model)
    if isinstance(spec.norm, nodes.RmsNorm):
        o = rms_norm(o, weights["out_norm.weight"])
    o = o.reshape(B, T, H * Dv)
    if isinstance(spec.norm, nodes.GroupNorm):  # per head: mean/var over the head's Dv channels
        per_head = o.reshape(B, T, H, Dv)
        mean = per_head.mean(-1, keepdim=True)
        var = ((per_head - mean) ** 2).mean(-1, keepdim=True)
        o = ((per_head - mean) / torch.sqrt(var + 1e-5)).reshape(B, T, H * Dv)
        o = o * weights["out_norm.weight"] + weights["out_norm.bias"]
    if isinstance(spec.gate, nodes.SwishGate):
        o = o * F.silu(linear(x, weights, "gate_proj"))
    elif isinstance(spec.gate, nodes.SigmoidGate):
        o = o * torch.sigmoid(linear(x, weights, "gate_proj"))
    return linear(o, weights, "o_proj")
