"""topk_element_ref and topk_chunk_ref against independent oracles.

Forwards are checked against naive per-query loops (written here, or the module's deliberately
naive `top1_element_closed_form`); STE gradients against hand-derived formulas, against the
gradients of plain softmax attention (SDPA), and with gradcheck where the forward is
differentiable. float64 throughout, small shapes with odd lengths.
"""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from seqdsl.reference.attention import alibi_slopes
from seqdsl.reference.top1 import topk_chunk_ref, topk_element_ref
from tests.oracles.top1_loops import top1_element_closed_form, top1_element_ste_grads

F64 = torch.float64


def make_qkv(B=2, T=7, H=2, Dk=6, Dv=5, seed=0, grad=False):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, T, H, d, generator=gen, dtype=F64) for d in (Dk, Dk, Dv))
    return [t.requires_grad_(grad) for t in (q, k, v)]


def sdpa_causal(q, k, v, *, scale, mask=None):
    """Softmax attention by torch's SDPA; `mask` (B, H, T, T) bool, default causal."""
    T = q.shape[1]
    if mask is None:
        mask = torch.ones(T, T, dtype=torch.bool).tril()
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale)
    return out.transpose(1, 2)


# --- element selection ----------------------------------------------------------------------------


def naive_topk_element(q, k, v, *, scale, k_top, temperature=1.0, window=None, slopes=None):
    """Per query: list visible scores, sort (stable: lowest index wins ties), softmax the top k."""
    B, T, H, _ = q.shape
    out = torch.zeros(B, T, H, v.shape[-1], dtype=v.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = [j for j in range(i + 1) if window is None or j > i - window]
                score = {j: float(q[b, i, h] @ k[b, j, h]) * scale
                         - (0.0 if slopes is None else float(slopes[h]) * (i - j)) for j in keys}
                top = sorted(keys, key=lambda j: -score[j])[:k_top]
                logits = torch.tensor([score[j] / temperature for j in top], dtype=F64)
                w = torch.softmax(logits, dim=0)
                out[b, i, h] = sum(wj * v[b, j, h] for wj, j in zip(w, top))
    return out


@pytest.mark.parametrize("T", [1, 7, 63, 100, 129])
@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_top1_forward_matches_closed_form_loop(T, temperature):
    q, k, v = make_qkv(B=1, T=T, seed=T)
    ours = topk_element_ref(q, k, v, scale=0.4, temperature=temperature)
    torch.testing.assert_close(ours, top1_element_closed_form(q, k, v, 0.4), rtol=0, atol=0)


@pytest.mark.parametrize("k_top", [1, 2, 3, 50])
@pytest.mark.parametrize("window,use_alibi", [(None, False), (4, False), (None, True), (6, True)])
def test_topk_forward_matches_naive_loop(k_top, window, use_alibi):
    q, k, v = make_qkv(B=1, T=23, seed=k_top)
    slopes = alibi_slopes(2, dtype=F64) if use_alibi else None
    kw = dict(scale=0.5, k_top=k_top, temperature=0.7, window=window)
    ours = topk_element_ref(q, k, v, alibi_slopes=slopes, grad="none", **kw)
    theirs = naive_topk_element(q, k, v, slopes=slopes, **kw)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


def test_element_ties_go_to_the_lowest_index():
    q, _, v = make_qkv(B=1, T=9)
    k = torch.ones_like(q)  # every key scores alike for a given query
    out = topk_element_ref(q, k, v, scale=1.0)
    torch.testing.assert_close(out, v[:, :1].expand_as(out), rtol=0, atol=0)


@pytest.mark.parametrize("value_grad", ["hard", "soft"])
@pytest.mark.parametrize("T", [1, 7, 63, 100])
def test_ste_grads_match_hand_derived_formula(value_grad, T):
    q, k, v = make_qkv(T=T, seed=T, grad=True)
    out = topk_element_ref(q, k, v, scale=0.4, temperature=0.6, value_grad=value_grad)
    dout = torch.randn_like(out)
    autograd = torch.autograd.grad(out, (q, k, v), dout)
    by_hand = top1_element_ste_grads(q, k, v, dout, scale=0.4, temperature=0.6,
                                     value_grad=value_grad)
    for a, b in zip(autograd, by_hand):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("value_grad", ["hard", "soft"])
def test_ste_score_grads_equal_softmax_attention_grads(value_grad):
    # The STE backward is softmax attention's backward for q and k (both modes) and for v (soft).
    q, k, v = make_qkv(T=63, grad=True)
    ours = topk_element_ref(q, k, v, scale=0.4, value_grad=value_grad)
    soft = sdpa_causal(q, k, v, scale=0.4)
    dout = torch.randn_like(ours)
    dq, dk, dv = torch.autograd.grad(ours, (q, k, v), dout)
    sq, sk, sv = torch.autograd.grad(soft, (q, k, v), dout)
    torch.testing.assert_close(dq, sq, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dk, sk, rtol=1e-10, atol=1e-12)
    if value_grad == "soft":
        torch.testing.assert_close(dv, sv, rtol=1e-10, atol=1e-12)
    else:
        assert not torch.allclose(dv, sv)


@pytest.mark.parametrize("value_grad", ["hard", "soft"])
def test_ste_forward_is_exactly_the_hard_forward(value_grad):
    q, k, v = make_qkv(T=100, grad=True)
    ste = topk_element_ref(q, k, v, scale=0.4, k_top=3, value_grad=value_grad)
    hard = topk_element_ref(q, k, v, scale=0.4, k_top=3, grad="none")
    assert torch.equal(ste, hard)


def test_gradcheck_where_the_forward_is_differentiable():
    q, k, v = make_qkv(B=1, T=7, H=1, Dk=3, Dv=2, grad=True)
    # value_grad=hard is the exact derivative of the hard forward with respect to v
    assert torch.autograd.gradcheck(
        lambda v_: topk_element_ref(q.detach(), k.detach(), v_, scale=0.7), (v,))
    # grad=none with k_top > 1: the softmax inside the (locally fixed) selected set
    assert torch.autograd.gradcheck(
        lambda *x: topk_element_ref(*x, scale=0.7, k_top=2, grad="none", window=5), (q, k, v))


def test_grad_none_top1_gives_zero_grad_to_q_and_k():
    q, k, v = make_qkv(T=63, grad=True)
    out = topk_element_ref(q, k, v, scale=0.4, grad="none")
    dout = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    assert torch.count_nonzero(dq) == 0 and torch.count_nonzero(dk) == 0
    _, _, hard_dv = top1_element_ste_grads(q, k, v, dout, scale=0.4)
    torch.testing.assert_close(dv, hard_dv, rtol=1e-12, atol=1e-14)


def test_k_top_covering_every_key_is_softmax_attention():
    q, k, v = make_qkv(T=7, grad=True)
    ours = topk_element_ref(q, k, v, scale=0.4, k_top=7)
    soft = sdpa_causal(q, k, v, scale=0.4)
    torch.testing.assert_close(ours, soft, rtol=1e-10, atol=1e-12)


# --- chunk selection ------------------------------------------------------------------------------


def naive_topk_chunk(q, k, v, *, chunk, scale, k_top, temperature=1.0, score="max", local=True, group=1):
    """Per query: score candidate chunks, pick the best k_top, softmax over the gathered keys.
    `group` > 1: the heads h // group == j pick together, ranking by the sum of their softmaxes
    over the candidates (NSA's shared selection). Returns (output, G, attended): G the
    differentiable STE gate (the head's softmax mass of the selected candidates), attended the
    (B, H, T, T) bool mask of the keys each query mixed."""
    B, T, H, _ = q.shape
    out = [[[None] * H for _ in range(T)] for _ in range(B)]
    gate = [[[None] * H for _ in range(T)] for _ in range(B)]
    attended = torch.zeros(B, H, T, T, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            ci = i // chunk
            cands = list(range(ci if local else ci + 1))
            rows, scores = [], []
            for h in range(H):
                row = k[b, : i + 1, h] @ q[b, i, h] * scale  # scores of the visible keys
                chunk_score = []
                for c in cands:
                    keys = list(range(c * chunk, min((c + 1) * chunk, i + 1)))
                    if score == "max":
                        chunk_score.append(row[keys].max())
                    elif score == "mean":
                        chunk_score.append(q[b, i, h] @ k[b, keys, h].mean(0) * scale)
                    else:
                        chunk_score.append(temperature * torch.logsumexp(row[keys] / temperature, 0))
                rows.append(row)
                scores.append(chunk_score)
            for h in range(H):
                if group == 1:
                    rank = [x.item() for x in scores[h]]
                else:  # the group's heads: each one's softmax over the candidates, summed
                    mates = range(h // group * group, (h // group + 1) * group)
                    rank = [sum(torch.softmax(torch.stack(scores[m]) / temperature, 0)[n].item() for m in mates)
                            for n in range(len(cands))]
                picked = sorted(cands, key=lambda c: (-rank[c], c))[:k_top]
                keys = [j for j in range(i + 1)
                        if j // chunk in picked or (local and j // chunk == ci)]
                attended[b, h, i, keys] = True
                out[b][i][h] = torch.softmax(rows[h][keys] / temperature, 0) @ v[b, keys, h]
                if cands:
                    gate[b][i][h] = torch.softmax(torch.stack(scores[h]) / temperature, 0)[picked].sum()
                else:
                    gate[b][i][h] = torch.zeros((), dtype=q.dtype)
    stack = lambda x: torch.stack([torch.stack([torch.stack(row) for row in per_b]) for per_b in x])
    return stack(out), stack(gate)[..., None], attended


@pytest.mark.parametrize(
    "chunk,T,k_top",
    [(1, 7, 2), (1, 33, 1), (4, 63, 1), (4, 63, 3), (4, 50, 2), (16, 70, 1), (16, 81, 2)],
)
@pytest.mark.parametrize("local", [True, False])
@pytest.mark.parametrize("score", ["max", "mean", "lse"])
def test_chunk_forward_matches_naive_loop(chunk, T, k_top, local, score):
    q, k, v = make_qkv(B=1, T=T, seed=chunk + T)
    kw = dict(chunk=chunk, scale=0.5, k_top=k_top, temperature=0.8, score=score, local=local)
    with torch.no_grad():
        ours = topk_chunk_ref(q, k, v, **kw)
        theirs, _, _ = naive_topk_chunk(q, k, v, **kw)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("group", [2, 4])
@pytest.mark.parametrize("local", [True, False])
@pytest.mark.parametrize("score", ["max", "mean", "lse"])
def test_chunks_chosen_per_group_match_the_naive_loop(group, local, score):
    """`share = group`: forward and (STE) gradients against the loop's own shared ranking."""
    q, k, v = make_qkv(B=1, T=29, H=4, seed=group + local, grad=True)
    kw = dict(chunk=4, scale=0.5, k_top=2, temperature=0.7, score=score, local=local)
    ours = topk_chunk_ref(q, k, v, group=group, **kw)
    o_naive, gate, attended = naive_topk_chunk(q, k, v, group=group, **kw)
    torch.testing.assert_close(ours, o_naive, rtol=1e-10, atol=1e-12)
    dout = torch.randn_like(ours)
    rowdot = (o_naive * dout).sum(-1, keepdim=True).detach()
    surrogate = (o_naive * dout).sum() + (rowdot * gate).sum()
    for a, b in zip(torch.autograd.grad(ours, (q, k, v), dout), torch.autograd.grad(surrogate, (q, k, v))):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    # the heads of a group attend the same earlier chunks; somewhere a group differs from its
    # heads' own choices (else the test would not tell sharing from choosing alone)
    earlier = torch.arange(29)[None, :] // 4 < torch.arange(29)[:, None] // 4
    chosen = attended & earlier
    for j in range(4 // group):
        heads = chosen[:, j * group:(j + 1) * group]
        assert torch.equal(heads, heads[:, :1].expand_as(heads))
    _, _, alone = naive_topk_chunk(q.detach(), k.detach(), v.detach(), **kw)
    assert not torch.equal(alone & earlier, chosen)


def test_a_group_of_one_head_chooses_alone():
    """group = 1: each head's output is what the head computes alone (a one-head call)."""
    q, k, v = make_qkv(B=1, T=21, H=3, seed=5)
    kw = dict(chunk=4, scale=0.5, k_top=2, temperature=0.7, score="lse")
    alone = torch.cat([topk_chunk_ref(q[:, :, h:h + 1], k[:, :, h:h + 1], v[:, :, h:h + 1], **kw) for h in range(3)],
                      dim=2)
    torch.testing.assert_close(topk_chunk_ref(q, k, v, group=1, **kw), alone, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="group must divide the 3 heads"):
        topk_chunk_ref(q, k, v, group=2, **kw)


def test_exact_and_approx_pick_different_chunks_on_crafted_keys():
    # chunk 0: keys (10, 0), (-10, 0): mean (0, 0) but the best single key scores 10
    # chunk 1: keys (1, 0), (1, 0): mean and max both score 1
    # query 4 (own chunk 2, key (-100, 0)), q = (1, 0): Exact -> chunk 0, Approx -> chunk 1
    k = torch.tensor([[10.0, 0], [-10, 0], [1, 0], [1, 0], [-100, 0]], dtype=F64)
    q = torch.tensor([[1.0, 0]] * 5, dtype=F64)
    v = torch.eye(5, dtype=F64)
    q, k, v = (t[None, :, None, :] for t in (q, k, v))
    kw = dict(chunk=2, scale=1.0, local=False)
    exact = topk_chunk_ref(q, k, v, score="max", **kw)[0, 4, 0]
    approx = topk_chunk_ref(q, k, v, score="mean", **kw)[0, 4, 0]
    e = torch.softmax(torch.tensor([10.0, -10.0], dtype=F64), 0)
    torch.testing.assert_close(exact, torch.tensor([e[0], e[1], 0, 0, 0], dtype=F64))
    torch.testing.assert_close(approx, torch.tensor([0, 0, 0.5, 0.5, 0], dtype=F64))
    # local=True adds the own chunk (key 4, score -100: weight ~e^-110, ~e^-101) to the same pick
    exact_local = topk_chunk_ref(q, k, v, score="max", chunk=2, scale=1.0)[0, 4, 0]
    torch.testing.assert_close(exact_local, exact)


def test_chunk_ties_go_to_the_lowest_chunk():
    q, _, v = make_qkv(B=1, T=13, H=1)
    k = torch.ones_like(q)  # all chunks score alike: chunk 0 is picked, weights are uniform
    out = topk_chunk_ref(q, k, v, chunk=3, scale=1.0)
    for i in range(13):
        keys = [0, 1, 2] * (i >= 3) + list(range(i - i % 3, i + 1))
        torch.testing.assert_close(out[0, i, 0], v[0, keys, 0].mean(0))


@pytest.mark.parametrize("local", [True, False])
def test_chunk_0_and_local_semantics(local):
    q, k, v = make_qkv(B=1, T=10, H=1)
    out = topk_chunk_ref(q, k, v, chunk=4, scale=0.5, local=local)
    full = sdpa_causal(q, k, v, scale=0.5)
    # chunk 0 sees only its own causal prefix, under both settings: that is causal attention
    torch.testing.assert_close(out[:, :4], full[:, :4], rtol=1e-12, atol=1e-14)


def test_k_top_covering_every_chunk_is_causal_attention():
    q, k, v = make_qkv(T=37)
    for local in (True, False):
        out = topk_chunk_ref(q, k, v, chunk=4, scale=0.5, k_top=10, local=local)
        torch.testing.assert_close(out, sdpa_causal(q, k, v, scale=0.5), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("score", ["max", "mean", "lse"])
@pytest.mark.parametrize("local", [True, False])
def test_chunk_grads_none_is_fixed_selection_and_ste_adds_the_gate(score, local):
    T, chunk = 23, 4
    q, k, v = make_qkv(B=1, T=T, seed=3, grad=True)
    kw = dict(chunk=chunk, scale=0.5, k_top=2, temperature=0.7, score=score, local=local)
    none = topk_chunk_ref(q, k, v, grad="none", **kw)
    ste = topk_chunk_ref(q, k, v, grad="ste", **kw)
    assert torch.equal(none, ste)
    dout = torch.randn_like(none)
    g_none = torch.autograd.grad(none, (q, k, v), dout)
    g_ste = torch.autograd.grad(ste, (q, k, v), dout)

    # grad=none == softmax attention (SDPA) under the selection the naive loop fixed
    o_naive, gate, attended = naive_topk_chunk(q, k, v, **kw)
    fixed = sdpa_causal(q, k, v, scale=0.5 / 0.7, mask=attended)
    for a, b in zip(g_none, torch.autograd.grad(fixed, (q, k, v), dout)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)

    # ste == none + the gradient of sg(dO . o) * G, with G built by the naive loop
    rowdot = (o_naive * dout).sum(-1, keepdim=True).detach()
    surrogate = (o_naive * dout).sum() + (rowdot * gate).sum()
    for a, b in zip(g_ste, torch.autograd.grad(surrogate, (q, k, v))):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    # the gate adds a real gradient to q and k (scores), none to v
    assert not torch.allclose(g_ste[0], g_none[0]) and not torch.allclose(g_ste[1], g_none[1])
    torch.testing.assert_close(g_ste[2], g_none[2], rtol=0, atol=0)


# --- invariants, both families --------------------------------------------------------------------


def run_family(family, q, k, v, **kw):
    if family == "element":
        return topk_element_ref(q, k, v, scale=0.5, **kw)
    return topk_chunk_ref(q, k, v, chunk=4, scale=0.5, **kw)


@settings(max_examples=30, deadline=None)
@given(
    family=st.sampled_from(["element", "chunk"]),
    T=st.integers(2, 40),
    cut=st.integers(0, 39),
    k_top=st.integers(1, 3),
    local=st.booleans(),
    score=st.sampled_from(["max", "mean", "lse"]),
    seed=st.integers(0, 2**16),
)
def test_future_tokens_never_change_past_outputs(family, T, cut, k_top, local, score, seed):
    cut = cut % T
    kw = {"k_top": k_top} if family == "element" else {"k_top": k_top, "local": local,
                                                       "score": score}
    q, k, v = make_qkv(B=1, T=T, seed=seed)
    before = run_family(family, q, k, v, **kw)
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    for t in (q2, k2, v2):
        t[:, cut + 1:] = torch.randn_like(t[:, cut + 1:]) * 3
    after = run_family(family, q2, k2, v2, **kw)
    assert torch.equal(before[:, : cut + 1], after[:, : cut + 1])


@pytest.mark.parametrize("family", ["element", "chunk"])
def test_batch_invariance(family):
    q, k, v = make_qkv(B=3, T=63)
    whole = run_family(family, q, k, v, k_top=2)
    for b in range(3):
        one = run_family(family, q[b:b + 1], k[b:b + 1], v[b:b + 1], k_top=2)
        torch.testing.assert_close(whole[b:b + 1], one, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("family", ["element", "chunk"])
def test_runs_forward_backward_on_device(device, dtype, family):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    q, k, v = (t.to(device=device, dtype=dtype).requires_grad_() for t in make_qkv(T=63))
    out = run_family(family, q, k, v)
    out.sum().backward()
    assert out.device.type == device and out.dtype == dtype
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    # the float64 CPU golden agrees
    golden = run_family(family, *(t.detach().cpu().double() for t in (q, k, v)))
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(out.detach().cpu().double(), golden, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_shared_key_selects_the_earliest_keys_exactly(dtype):
    """With every key the same vector (`relation = const_keys`, `shared_key`), every visible key
    of a query scores the same: top-k picks the k earliest, exactly, whatever the matrix product's
    rounding (a blocked product rounded one column of identical keys differently in float64 on an
    AMD EPYC, and top-1 picked key 12). The output is then the mean of the first k values."""
    q, _, v = make_qkv(B=1, T=16, H=2, Dk=16, Dv=5, seed=3)
    q, v = q.to(dtype), v.to(dtype)
    key = torch.randn(2, 16, dtype=dtype)
    k = key.expand(1, 16, 2, 16)
    for k_top in (1, 3):
        got = topk_element_ref(q, k, v, scale=0.25, k_top=k_top, grad="none", shared_key=True)
        counts = torch.arange(16).clamp(max=k_top - 1) + 1  # query i sees i + 1 keys, takes the first min(k, i + 1)
        want = torch.stack([v[:, :n].mean(1) for n in counts.tolist()], 1)
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-6), k_top
    chunked = topk_chunk_ref(q, k, v, chunk=4, scale=0.25, k_top=1, grad="none", score="mean", shared_key=True)
    # each query attends chunk 0 (the earliest of the tied candidates) and its own chunk up to itself
    for i in range(4, 16):
        keys = list(range(4)) + list(range(i // 4 * 4, i + 1))
        assert torch.allclose(chunked[:, i], v[:, keys].mean(1), atol=1e-6), i
