"""Reference (oracle) for Top-k selection: element selection and chunk selection (arXiv 2505.18522).

Shape legend
    B   batch        T   sequence length        H   heads        Dk / Dv   key / value head dim
    C   number of chunks = ceil(T / chunk)      q, k (B, T, H, Dk)   v, output (B, T, H, Dv)
    scores, weights, masks (B, H, T, T) [..., i, j];   chunk scores, chunk masks (B, H, T, C)

Notation: s_ij the scaled, causal scores of `attention.attention_scores`; tau the temperature;
sg(x) = x.detach() (stop-gradient); "visible" = j <= i (and inside the window or among its sink
tokens, if any).
These definitions are the spec semantics the generated Triton kernels must match.

Element selection, `topk_element_ref`
    (1) S_i = the k_top highest-scoring visible keys of query i (ties: lowest index; all visible
        keys when there are fewer than k_top).
    (2) w_sel_ij = softmax over S_i of s_ij / tau (zero outside S_i); k_top = 1: o_i = v_{argmax}.
    (3) p_ij = softmax over all visible j of s_ij / tau: the surrogate the STE differentiates.
    grad="ste", value_grad="hard":  o = (p + sg(w_sel - p)) @ v
        forward o = w_sel @ v;  dL/dv = w_sel^T dO;  dL/dp_ij = g_ij = dO_i . v_j, so
        ds_ij = p_ij (g_ij - D_i) / tau with D_i = sum_l p_il g_il = dO_i . (p @ v)_i: the
        rowsum(dO * O) term of flash-attention's backward taken with the SOFT output p @ v.
    grad="ste", value_grad="soft":  o = p @ v + sg((w_sel - p) @ v)
        forward o = w_sel @ v;  dL/dv = p^T dO;  ds as above (identical q, k gradients).
    grad="none":  S_i is chosen without gradient; o = w_sel @ v. For k_top > 1 the softmax inside
        S_i still trains q and k; for k_top = 1 q and k get exactly zero gradient.
    The code writes the STE as sg(w_sel) + (p - sg(p)): the same value and gradient as the formulas
    above, but the forward is bit-for-bit w_sel @ v (x - sg(x) is exactly 0).

Chunk selection, `topk_chunk_ref` (no window/alibi: chunks are the visibility structure; sink
tokens are the selection's own, `top(..., sink=n)`)
    Key j lives in chunk j // chunk; query i in chunk c_i = i // chunk.
    (1) Candidates: local=True  -> the earlier chunks c < c_i (always complete);
                    local=False -> c <= c_i, the own chunk scored on its visible keys j <= i.
    (2) Chunk score of chunk c for query i, over the chunk's visible keys V_ic:
            "max"  = max_{j in V_ic} s_ij                  (Exact: holds the best single key)
            "mean" = q_i . mean_{j in V_ic}(k_j) * scale   (Approx; = mean of s_ij, by linearity)
            "lse"  = tau * logsumexp_{j in V_ic}(s_ij / tau)
        "lse" carries the factor tau so that every score is in the units of s and G below divides
        by tau once: softmax_c(lse_c / tau) is then the chunk's share of the full softmax mass.
        The ranking, hence the selection, is the same as with logsumexp(s / tau).
    (3) Select the k_top best candidates (ties: lowest chunk index; all if fewer).
        share="group" (`group` = g query heads per key/value head, heads h = g * j + r sharing
        head j): the heads of a group rank the candidates together by
            r_ic = sum over the group's heads h of softmax over the candidates c' of score_hic' / tau
        (NSA's shared selection: each head's chunk probabilities, summed), and each head of the
        group attends the group's choice; steps (4), (5) and the gate use the head's own scores.
    (4) Attended keys A_i = visible keys of the selected chunks, plus (local=True) the causal part
        of the own chunk, plus (sink = n) the first n tokens, j < n and j <= i: a set, so a key
        both sunk and selected is attended once. A query of chunk 0 with local=True has no
        candidates: A_i = its prefix. The sinks change neither candidates nor scores.
    (5) o_i = sum_{j in A_i} softmax_{A_i}(s_ij / tau) v_j.
        One masked softmax here; a kernel computes it per chunk and merges by log-sum-exp: with
        m_c = logsumexp_{j in c}(s_ij / tau) and o_c the softmax-weighted mean of chunk c,
        o_i = sum_c exp(m_c - M) o_c with M = logsumexp_c m_c, which is the same number.
    grad="ste":  o <- o * (1 + G - sg(G)),  G_i = sum over selected c of softmax over the
        candidates c' of (score_ic' / tau). The value is unchanged; dL/dG_i = dO_i . o_i flows into
        the chunk scores. No candidates -> G_i = 0 (a constant, factor exactly 1).
    grad="none": the selection carries no gradient; the attention inside (5) trains q, k, v.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.ir.key import KernelKey, chunk_size, selection_group, sliding_window
from seqdsl.reference.attention import _check_qkv, attention_scores, visibility_mask

_NEG_INF = float("-inf")


def _topk_mask(x: Tensor, allowed: Tensor, k_top: int) -> Tensor:
    """Bool mask, shape of x: the k_top largest entries of x along the last dim among `allowed`.

    Ties go to the lowest index: a stable descending sort keeps equal entries in index order.
    With fewer than k_top allowed entries, all of them. No gradient: the choice is discrete."""
    if k_top <= 0:
        raise ValueError(f"k_top must be positive, got {k_top}")
    allowed = allowed.expand(x.shape)
    ranked = x.detach().masked_fill(~allowed, _NEG_INF)
    order = torch.sort(ranked, dim=-1, descending=True, stable=True).indices
    top = order[..., : min(k_top, x.shape[-1])]
    picked = torch.zeros_like(allowed).scatter(-1, top, True)
    # Disallowed entries sort last (-inf) but are still picked when k_top exceeds the allowed count.
    return picked & allowed


def _masked_softmax(x: Tensor, mask: Tensor) -> Tensor:
    """softmax of x over the True entries of mask (last dim); an all-False row gives all zeros
    (not nan, whose gradient would leak into the other rows' inputs)."""
    mask = mask.expand(x.shape)
    any_row = mask.any(dim=-1, keepdim=True)
    logits = x.masked_fill(~mask, _NEG_INF).masked_fill(~any_row, 0.0)
    return torch.softmax(logits, dim=-1) * mask


def _mix(w: Tensor, v: Tensor) -> Tensor:
    """(B, H, T, T) weights x (B, T, H, Dv) values -> (B, T, H, Dv)."""
    return torch.einsum("bhij,bjhd->bihd", w, v)


def topk_element_ref(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    k_top: int = 1,
    temperature: float = 1.0,
    grad: Literal["ste", "none"] = "ste",
    value_grad: Literal["hard", "soft"] = "hard",
    window: int | None = None,
    sink: int = 0,
    alibi_slopes: Tensor | None = None,
    shared_key: bool = False,
) -> Tensor:
    """(B, T, H, Dv) Top-k element selection; gradients as defined in the module docstring.
    `shared_key`: every key is k[:, 0] (`attention_scores`)."""
    _check_qkv(q, k, v)
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    T = q.shape[1]
    s = attention_scores(q, k, scale=scale, alibi_slopes=alibi_slopes, shared_key=shared_key)
    visible = visibility_mask(T, window=window, device=q.device, sink=sink)
    z = (s / temperature).masked_fill(~visible, _NEG_INF)

    # (1) the selected set S_i (no gradient).
    chosen = _topk_mask(z, visible, k_top)
    # (2) softmax restricted to S_i; for k_top = 1 a single finite logit gives exactly 1.0.
    w_sel = torch.softmax(z.masked_fill(~chosen, _NEG_INF), dim=-1)
    if grad == "none":
        return _mix(w_sel, v)
    if grad != "ste":
        raise ValueError(f"unknown grad {grad!r}")

    # (3) the surrogate: softmax over every visible key.
    p = torch.softmax(z, dim=-1)
    if value_grad == "hard":
        # o = (p + sg(w_sel - p)) @ v, written so the forward is exactly w_sel @ v.
        return _mix(w_sel.detach() + (p - p.detach()), v)
    if value_grad == "soft":
        # o = p @ v + sg((w_sel - p) @ v): values are trained as if the soft output were used.
        soft = _mix(p, v)
        return _mix(w_sel.detach(), v.detach()) + (soft - soft.detach())
    raise ValueError(f"unknown value_grad {value_grad!r}")


def chunk_scores(
    s: Tensor, visible: Tensor, *, chunk: int, score: str, temperature: float = 1.0
) -> Tensor:
    """(B, H, T, C) score of each chunk for each query over its visible keys (step (2)).

    A chunk with no visible key scores -inf (it is never a candidate). Keys are padded to whole
    chunks with invisible entries, so T need not be a multiple of `chunk`."""
    B, H, T, _ = s.shape
    n_chunks = math.ceil(T / chunk)
    pad = n_chunks * chunk - T
    vis = F.pad(visible, (0, pad), value=False).view(T, n_chunks, chunk)
    sc = F.pad(s, (0, pad)).view(B, H, T, n_chunks, chunk)
    # A chunk with no visible key reduces over a row of zeros (finite, so no nan gradients), and
    # is then set to -inf.
    empty = ~vis.any(dim=-1)  # (T, C)
    if score == "max":
        out = sc.masked_fill(~vis, _NEG_INF).masked_fill(empty[..., None], 0.0).amax(dim=-1)
    elif score == "lse":
        logits = (sc / temperature).masked_fill(~vis, _NEG_INF).masked_fill(empty[..., None], 0.0)
        out = temperature * torch.logsumexp(logits, dim=-1)
    elif score == "mean":
        count = vis.sum(dim=-1).clamp(min=1).to(s.dtype)
        out = sc.masked_fill(~vis, 0.0).sum(dim=-1) / count
    else:
        raise ValueError(f"unknown chunk score {score!r}")
    return out.masked_fill(empty, _NEG_INF)


def topk_chunk_ref(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    chunk: int,
    scale: float,
    k_top: int = 1,
    temperature: float = 1.0,
    score: Literal["max", "mean", "lse"] = "max",
    local: bool = True,
    grad: Literal["ste", "none"] = "ste",
    shared_key: bool = False,
    sink: int = 0,
    group: int = 1,
) -> Tensor:
    """(B, T, H, Dv) Top-k chunk selection; semantics and gradients in the module docstring.
    `shared_key`: every key is k[:, 0] (`attention_scores`); `sink`: the first `sink` tokens
    attended besides the chunks, step (4); `group`: query heads choosing together, step (3)."""
    _check_qkv(q, k, v)
    if chunk <= 0:
        raise ValueError(f"chunk must be positive, got {chunk}")
    if sink < 0:
        raise ValueError(f"sink must be non-negative, got {sink}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if grad not in ("ste", "none"):
        raise ValueError(f"unknown grad {grad!r}")
    if group <= 0 or q.shape[2] % group:
        raise ValueError(f"group must divide the {q.shape[2]} heads, got {group}")
    T = q.shape[1]
    n_chunks = math.ceil(T / chunk)
    s = attention_scores(q, k, scale=scale, shared_key=shared_key)
    visible = visibility_mask(T, device=q.device)
    pos_chunk = torch.arange(T, device=q.device) // chunk  # chunk of token t, as query or key
    chunk_ids = torch.arange(n_chunks, device=q.device)

    # (1) candidates (T, C): earlier chunks, plus the own one when local=False.
    if local:
        candidate = chunk_ids[None, :] < pos_chunk[:, None]
    else:
        candidate = chunk_ids[None, :] <= pos_chunk[:, None]
    # (2) chunk scores and (3) the selection (no gradient).
    cs = chunk_scores(s, visible, chunk=chunk, score=score, temperature=temperature)
    chosen = _topk_mask(_group_ranks(cs, candidate, group, temperature), candidate, k_top)  # (B, H, T, C)

    # (4) attended keys: spread each query's chosen chunks onto their keys, keep visible ones.
    attend = chosen[..., pos_chunk] & visible
    if local:
        attend = attend | ((pos_chunk[None, :] == pos_chunk[:, None]) & visible)
    if sink:
        attend = attend | ((torch.arange(T, device=q.device) < sink)[None, :] & visible)
    # (5) one softmax over the union (= the log-sum-exp merge of per-chunk partials).
    w = torch.softmax((s / temperature).masked_fill(~attend, _NEG_INF), dim=-1)
    o = _mix(w, v)
    if grad == "none":
        return o

    # STE: G_i = softmax mass of the selected candidates; the factor 1 + G - sg(G) is exactly 1.
    g = (_masked_softmax(cs / temperature, candidate) * chosen).sum(dim=-1)  # (B, H, T)
    factor = 1.0 + (g - g.detach())
    return o * factor.permute(0, 2, 1)[..., None]


def _group_ranks(cs: Tensor, candidate: Tensor, group: int, temperature: float) -> Tensor:
    """(B, H, T, C) what step (3) ranks: the chunk scores themselves (group 1), or for heads
    choosing in groups of `group` the group's summed softmax over the candidates, the same for
    every head of the group (ties then break alike: one choice per group)."""
    if group == 1:
        return cs
    B, H, T, C = cs.shape
    p = _masked_softmax(cs / temperature, candidate).view(B, H // group, group, T, C).sum(dim=2)
    return p.repeat_interleave(group, dim=1).masked_fill(~candidate, _NEG_INF)


def selection_ref(key: KernelKey, q: Tensor, k: Tensor, v: Tensor, *, alibi_slopes: Tensor | None = None) -> Tensor:
    """The selection mixer of `key` (`key.select` set): element or chunk top-k with the key's
    scale, temperature, gradient modes and, for element selection, its window and sink tokens.
    q, k, v with one head each per query head (shared heads repeated by the caller)."""
    sel = key.select
    if sel is None:
        raise ValueError(f"{key.slug()} selects nothing (key.select is None)")
    shared_key = key.relation == "const_keys"  # ties by construction: kept exact
    if sel.over == "element":
        return topk_element_ref(q, k, v, scale=key.scale, k_top=sel.k, temperature=key.temperature, grad=sel.grad,
                                value_grad=sel.value_grad, window=sliding_window(key), sink=key.sink,
                                alibi_slopes=alibi_slopes, shared_key=shared_key)
    return topk_chunk_ref(q, k, v, chunk=chunk_size(sel), scale=key.scale, k_top=sel.k, temperature=key.temperature,
                          score=sel.score, local=sel.local, grad=sel.grad, shared_key=shared_key, sink=sel.sink,
                          group=selection_group(key))
