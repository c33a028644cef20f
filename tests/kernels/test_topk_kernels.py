"""The generated top-k chunk kernels (k > 1, grad = none and the STE gate) against the float64
reference (seqdsl/reference/top1.py: topk_chunk_ref), as tests/kernels/test_top1_kernels.py does
for k = 1.

Outputs and dq, dk, dv, norm-relative, over k from 2 to 16 (more than the candidates, so slots
stay empty), lengths around chunk boundaries, both scores, the local chunk on and off, grouped
key/value heads, and "grid" data whose duplicated keys tie chunk scores (the kernels must keep the
lowest chunk index among equals, as the reference's stable sort does). Decoding against the full
forward's last row. On CPU under TRITON_INTERPRET=1 (tests/kernels/conftest.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from seqdsl.ir import support
from seqdsl.kernels import top1, topk_chunk
from seqdsl import custom_ops
from tests.kernels.keys import variant
from tests.kernels.test_top1_kernels import DEVICES, FAST, assert_matches, data_kinds, make_inputs


def topk_key(score: str, *, k: int, chunk: int = 16, local: bool = True, heads: int = 2, kv_groups: int = 2,
             dk: int = 16, dv: int = 16, grad: str = "none", sink: int = 0, share: str = "head"):
    base = "top1_chunk_exact" if score == "max" else "top1_chunk_approx"
    key = variant(base, dk=dk, dv=dv, chunk=chunk, local=local, grad=grad, k=k, score=score, sink=sink, share=share)
    return dataclasses.replace(key, heads=heads, kv_groups=kv_groups)


@FAST
@given(kind=data_kinds, k=st.sampled_from([2, 3, 5, 16]), chunk=st.sampled_from([16, 32]),
       length=st.sampled_from(["short", "k+1", "odd", "many"]), score=st.sampled_from(["max", "mean", "lse"]),
       local=st.booleans(), groups=st.sampled_from([(2, 2), (4, 2), (3, 1)]), dims=st.sampled_from([(16, 16), (32, 64)]),
       grad=st.sampled_from(["none", "ste"]))
# ties between chunk scores (duplicated keys on the grid), fewer candidates than k, both scores,
# the STE gate (into q and k through every candidate's score) with each score and local chunk
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=21), k=3, chunk=16, length="many", score="max",
         local=True, groups=(2, 2), dims=(16, 16), grad="none")
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=22), k=2, chunk=16, length="many", score="mean",
         local=False, groups=(4, 2), dims=(16, 16), grad="none")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=23), k=16, chunk=16, length="odd",
         score="mean", local=True, groups=(3, 1), dims=(32, 64), grad="none")
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=24), k=2, chunk=16, length="many", score="max",
         local=False, groups=(4, 2), dims=(16, 16), grad="ste")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=25), k=3, chunk=16, length="many", score="mean",
         local=True, groups=(2, 2), dims=(16, 16), grad="ste")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=26), k=3, chunk=32, length="odd", score="mean",
         local=False, groups=(4, 2), dims=(32, 64), grad="ste")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=27), k=3, chunk=16, length="many", score="max",
         local=True, groups=(3, 1), dims=(16, 16), grad="ste")
# lse: with and without the STE gate (its gradient through every key of every candidate chunk, by
# the key's softmax weight within the chunk), local chunk on and off, grouped heads
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=28), k=3, chunk=16, length="many", score="lse",
         local=True, groups=(2, 2), dims=(16, 16), grad="ste")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=29), k=2, chunk=32, length="odd", score="lse",
         local=False, groups=(4, 2), dims=(32, 64), grad="ste")
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=30), k=3, chunk=16, length="many", score="lse",
         local=False, groups=(3, 1), dims=(16, 16), grad="none")
# k = 1 with lse scores: the top-k kernels run it (the Top-1 chunk kernels score by max and mean)
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=33), k=1, chunk=16, length="many", score="lse",
         local=True, groups=(2, 2), dims=(16, 16), grad="ste")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=34), k=1, chunk=16, length="odd", score="lse",
         local=False, groups=(2, 1), dims=(16, 16), grad="ste")
# mean keys with k > 4: the selection keeps sorted ranks (codegen/choices.py, sorted_select); with
# ties on the grid, the own chunk as a candidate and the STE gate's scores read back from the ranks
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=61), k=5, chunk=16, length="many", score="mean",
         local=False, groups=(2, 2), dims=(16, 16), grad="ste")
def test_topk_chunk_kernels_match_reference(kind, k, chunk, length, score, local, groups, dims, grad):
    T = {"short": chunk - 3, "k+1": 2 * chunk + 1, "odd": 3 * chunk - 5, "many": 6 * chunk + 7}[length]
    H, HK = groups
    key = topk_key(score, k=k, chunk=chunk, local=local, heads=H, kv_groups=HK, dk=dims[0], dv=dims[1], grad=grad)
    if kind["data"] == "grid":
        key = dataclasses.replace(key, scale=0.25)  # a power of two keeps grid scores exact
    assert_matches(key, make_inputs(1, T, H, dims[0], dims[1], kv_heads=HK, **kind))


@FAST
@given(kind=data_kinds, k=st.sampled_from([1, 2, 3]), sink=st.sampled_from([1, 5, 16, 21, 40, 128]),
       length=st.sampled_from(["short", "k+1", "odd", "many"]), score=st.sampled_from(["max", "mean", "lse"]),
       local=st.booleans(), groups=st.sampled_from([(2, 2), (4, 2), (3, 1)]), grad=st.sampled_from(["none", "ste"]))
# sinks inside chunk 0 (chosen or not), spanning several chunks, past the sequence; k = 1 (the
# top-k kernels run it), ties on the grid, the STE gate, the own chunk as a candidate
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=41), k=2, sink=5, length="many", score="mean",
         local=True, groups=(2, 2), grad="none")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=42), k=3, sink=40, length="many", score="max",
         local=False, groups=(4, 2), grad="ste")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=43), k=1, sink=21, length="odd", score="lse",
         local=True, groups=(3, 1), grad="ste")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=44), k=1, sink=128, length="k+1", score="mean",
         local=False, groups=(2, 1), grad="none")
def test_topk_chunk_kernels_with_sink_tokens_match_reference(kind, k, sink, length, score, local, groups, grad):
    """top(k, over=chunk(16), sink=n): every query also attends the first n tokens, each key once
    (a sink inside a selected chunk or the own chunk is not counted again), against the float64
    reference; outputs and dq, dk, dv."""
    T = {"short": 13, "k+1": 16 * (k + 1) + 1, "odd": 16 * (k + 2) - 5, "many": 16 * (k + 4) + 7}[length]
    H, HK = groups
    key = topk_key(score, k=k, local=local, heads=H, kv_groups=HK, grad=grad, sink=sink)
    if kind["data"] == "grid":
        key = dataclasses.replace(key, scale=0.25)  # a power of two keeps grid scores exact
    assert support.triton(key).op == "triton.topk_chunk"
    assert_matches(key, make_inputs(1, T, H, 16, 16, kv_heads=HK, **kind))


def test_sink_tokens_change_what_the_kernels_attend():
    """The sink test above is not vacuous: at its shapes the sinks outside the chosen chunks move
    the reference's output, and the kernels follow (the same key without sinks differs)."""
    q, k, v, _ = make_inputs(1, 16 * 6 + 7, 2, 16, 16, kv_heads=2, data="float", magnitude=1.0, seed=45,
                             duplicate=False)
    with_sinks, without = (topk_key("mean", k=2, heads=2, kv_groups=2, sink=sink) for sink in (20, 0))
    want = top1.reference(with_sinks, q.double(), k.double(), v.double())
    assert ((top1.reference(without, q.double(), k.double(), v.double()) - want).norm() / want.norm()).item() > 1e-2
    got = top1.run(with_sinks, q, k, v)
    assert ((got.double() - want).norm() / want.norm()).item() < 1e-6


@FAST
@given(kind=data_kinds, k=st.sampled_from([1, 2, 3, 5]), length=st.sampled_from(["short", "k+1", "odd", "many"]),
       score=st.sampled_from(["max", "mean", "lse"]), groups=st.sampled_from([(2, 1), (4, 2), (4, 1), (3, 1)]),
       sink=st.sampled_from([0, 5]))
# ties on the grid (every head's scores tie alike), one key/value head for four query heads, k = 1
# (the top-k kernels run it), sinks beside the shared choice
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=51), k=2, length="many", score="mean",
         groups=(4, 1), sink=0)
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=52), k=3, length="many", score="max",
         groups=(4, 2), sink=5)
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=53), k=1, length="odd", score="lse",
         groups=(3, 1), sink=0)
# the sorted selection (mean keys, k > 4) on the grid's ties
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=62), k=5, length="many", score="mean",
         groups=(4, 1), sink=0)
def test_chunks_chosen_per_group_match_reference(kind, k, length, score, groups, sink):
    """share = group (NSA's shared selection): the heads of a key/value head rank the candidates by
    their summed softmaxes and attend the same chunks, against the float64 reference; outputs and
    dq, dk, dv."""
    T = {"short": 13, "k+1": 16 * (k + 1) + 1, "odd": 16 * (k + 2) - 5, "many": 16 * (k + 4) + 7}[length]
    H, HK = groups
    key = topk_key(score, k=k, heads=H, kv_groups=HK, sink=sink, share="group")
    if kind["data"] == "grid":
        key = dataclasses.replace(key, scale=0.25)  # a power of two keeps grid scores exact
    assert support.triton(key).op == "triton.topk_chunk"
    # one pass per (query, group) without sinks; with them, per key chunk over the pairs
    assert support.group_attention(key) == (sink == 0)
    assert_matches(key, make_inputs(1, T, H, 16, 16, kv_heads=HK, **kind))


@pytest.mark.parametrize("score", ["max", "mean"])
def test_chunks_chosen_per_group_with_keys_per_head_match_reference(score):
    """share = group where the kernels are handed k and v per query head (qk_groups 1 <
    kv_groups 2: seqdsl/ir/key.py, shared_kv_group): the group chooses together but its heads
    read different keys, so the attention runs per key chunk over the pairs (not
    `group_attention`), against float64."""
    key = dataclasses.replace(topk_key(score, k=2, heads=4, kv_groups=2, share="group"), qk_groups=1)
    assert support.triton(key).op == "triton.topk_chunk" and not support.group_attention(key)
    assert_matches(key, make_inputs(1, 16 * 6 + 5, 4, 16, 16, data="float", magnitude=1.0, seed=55, duplicate=False))


def test_chunks_chosen_per_group_change_what_the_kernels_attend():
    """The test above is not vacuous: at its shapes the group's choice moves the reference's
    output away from each head's own, and the kernels follow the group's."""
    q, k, v, _ = make_inputs(1, 16 * 7 + 3, 4, 16, 16, kv_heads=1, data="float", magnitude=1.0, seed=54,
                             duplicate=False)
    shared, alone = (topk_key("mean", k=2, heads=4, kv_groups=1, share=share) for share in ("group", "head"))
    want = top1.reference(shared, q.double(), k.double(), v.double())
    assert ((top1.reference(alone, q.double(), k.double(), v.double()) - want).norm() / want.norm()).item() > 1e-2
    got = top1.run(shared, q, k, v)
    assert ((got.double() - want).norm() / want.norm()).item() < 1e-6


@pytest.mark.parametrize("score", ["max", "mean"])
def test_chunks_chosen_per_group_rank_far_off_chunks_as_the_reference(score):
    """The group's summed probabilities of chunks far below the best underflow float32 (2^-288
    here): the kernels rank their log2, so the second and third choices are still the
    reference's (chunk 3, then 2), not ties at 0 broken by the lowest index (0 and 2)."""
    key = dataclasses.replace(topk_key(score, k=3, heads=2, kv_groups=1, share="group"), scale=0.25)
    T, D = 16 * 6 + 1, 16
    q = torch.zeros(1, T, 2, D)
    q[..., 0] = 1.0
    k = torch.zeros(1, T, 1, D)
    k[0, :, 0, 0] = torch.tensor([0.0, 4000, 2000, 3200, 800, 400, 0]).repeat_interleave(16)[:T]
    v = torch.randn(1, T, 1, D, generator=torch.Generator().manual_seed(0))
    _, saved = topk_chunk.forward(key, q, k, v)
    for row in range(80, T):  # the queries of chunks 5 and 6: chunks 1, 3, 2 are the best three
        for head in range(2):
            assert set(saved["sel"][head, row].tolist()) == {1, 2, 3}, (row, head)


def test_support_table_takes_nsa_form_of_shared_selection():
    """share = group on the kernels: the own chunk attended and no gradient through the choice
    (NSA's form); the STE gate or the own chunk as a candidate: the reference, with the reason."""
    assert support.triton(topk_key("mean", k=3, heads=4, kv_groups=1, share="group")).op == "triton.topk_chunk"
    assert support.triton(topk_key("max", k=1, heads=4, kv_groups=1, share="group")).op == "triton.topk_chunk"
    ste = support.triton(topk_key("mean", k=3, heads=4, kv_groups=1, share="group", grad="ste"))
    assert not ste.ok and "STE gate" in ste.reason and ste.slot == ("select", "share")
    candidate = support.triton(topk_key("mean", k=3, heads=4, kv_groups=1, share="group", local=False))
    assert not candidate.ok and "local = false" in candidate.reason


def test_support_table_admits_chunk_sinks_in_one_tile():
    assert support.triton(topk_key("mean", k=3, sink=4)).op == "triton.topk_chunk"
    assert support.triton(topk_key("max", k=1, sink=128)).op == "triton.topk_chunk"  # k = 1: the top-k kernels
    assert "at most 128" in support.triton(topk_key("mean", k=3, sink=129)).reason


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("score,local,sink,share", [("max", True, 0, "head"), ("max", False, 0, "head"),
                                                    ("mean", True, 0, "head"), ("mean", False, 0, "head"),
                                                    ("lse", True, 0, "head"), ("lse", False, 0, "head"),
                                                    ("mean", True, 20, "head"), ("max", False, 5, "head"),
                                                    ("mean", True, 0, "group"), ("lse", True, 5, "group")])
def test_topk_decode_matches_last_row_of_the_full_forward(score, local, sink, share, device):
    """One query at position L - 1 against the cache, four query heads on two key/value heads
    (read in place; a cache repeated per query head gives the same answer); with sink tokens too,
    and with the chunks chosen per key/value group."""
    key = topk_key(score, k=3, local=local, heads=4, kv_groups=2, sink=sink, share=share)
    for L in (1, 16, 17, 75):
        q, k, v, _ = make_inputs(1, L, 4, 16, 16, kv_heads=2, data="grid", magnitude=1.0, seed=L, duplicate=True)
        key_l = dataclasses.replace(key, scale=0.25)
        want = top1.reference(key_l, q.double(), k.double(), v.double())[:, -1:]
        q, k, v = (t.to(device) for t in (q, k, v))
        got = top1.decode(key_l, q[:, -1:], k, v)
        assert ((got.double().cpu() - want).norm() / want.norm()).item() < 1e-6, L
        repeated = top1.decode(key_l, q[:, -1:], k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2))
        assert torch.equal(got, repeated), L


def test_topk_queries_with_fewer_candidates_than_k_attend_all_of_them():
    """k = 16 of 16-token chunks at T = 50: no query has 16 earlier chunks, so every candidate is
    selected: the output is causal softmax attention over the whole prefix."""
    key = topk_key("max", k=16, heads=1, kv_groups=1)
    q, k, v, _ = make_inputs(1, 50, 1, 16, 16, data="float", magnitude=1.0, seed=3, duplicate=False)
    scores = torch.einsum("bihd,bjhd->bhij", q.double(), k.double()) * key.scale
    w = torch.softmax(scores.masked_fill(torch.ones(50, 50).triu(1).bool(), float("-inf")), -1)
    want = torch.einsum("bhij,bjhd->bihd", w, v.double())
    got = top1.run(key, q, k, v)
    assert ((got.double() - want).norm() / want.norm()).item() < 1e-6


def test_support_table_admits_top_k_chunks_up_to_16():
    for grad in ("none", "ste"):
        assert support.triton(topk_key("mean", k=3, grad=grad)).op == "triton.topk_chunk"
        assert support.triton(topk_key("max", k=16, grad=grad)).op == "triton.topk_chunk"
    assert "at most 16" in support.triton(topk_key("max", k=17)).reason


@pytest.mark.parametrize("spec,select", [("top1_element", {}), ("top1_chunk_exact", {"chunk": 16}),
                                         ("top1_chunk_approx", {"chunk": 16}),  # grouped mean keys (HK heads)
                                         ("top1_chunk_approx", {"chunk": 16, "k": 3, "grad": "none"}),
                                         ("top1_chunk_approx", {"chunk": 16, "k": 3, "grad": "ste", "local": False}),
                                         ("top1_chunk_exact", {"chunk": 16, "k": 2, "grad": "ste"}),
                                         ("top1_chunk_approx", {"chunk": 16, "k": 2, "grad": "none", "sink": 20}),
                                         ("top1_chunk_exact", {"chunk": 16, "k": 2, "grad": "none", "share": "group"})])
def test_the_training_ops_pass_opcheck(spec, select):
    """torch.compile traces the custom ops with their fake implementations: the real outputs'
    shapes, dtypes and strides must be the fakes' (a strided dq from the top-k backward failed
    `seqdsl train` on a GPU with torch.library's "see opcheck" error)."""
    key = dataclasses.replace(variant(spec, dk=16, dv=16, **select), heads=4, kv_groups=2)
    ops = top1.bind(key).ops
    q, k, v, do = make_inputs(1, 40, 4, 16, 16, kv_heads=2, data="float", magnitude=1.0, seed=2, duplicate=False)
    slug = key.slug()
    torch.library.opcheck(custom_ops.op(f"{slug}_train"),
                          tuple(t.requires_grad_() for t in (q, k, v)))
    out = ops.train(q, k, v)
    bwd = custom_ops.op(f"{slug}_bwd")
    # the backward op's arguments as the registered autograd formula passes them (kernels/ops.py)
    args = (q, k, v, do, *out[1:]) if spec == "top1_element" else (q, k, v, out[0], do, *out[1:])
    torch.library.opcheck(bwd, tuple(t.detach() for t in args))


def test_the_first_use_self_check_sees_a_wrong_gate(monkeypatch):
    """The planner trusts a kernel after `top1.self_check`: its sequence is long enough that the
    last queries keep fewer chunks than they have candidates (k + 2 chunks), so G < 1 and the
    STE gate's gradient is not zero. A gate that drops its dk is refused."""
    from seqdsl.kernels import topk_chunk

    key = topk_key("mean", k=3, grad="ste", heads=2, kv_groups=2)
    assert top1.check_length(key) > (3 + 1) * 16
    ok, _ = top1.self_check.__wrapped__(key, torch.float32, "cpu")
    assert ok
    real = topk_chunk._gate

    def without_dk(*args):
        dq, dk = real(*args)
        return dq, torch.zeros_like(dk)

    monkeypatch.setattr(topk_chunk, "_gate", without_dk)
    ok, why = top1.self_check.__wrapped__(key, torch.float32, "cpu")
    assert not ok and "dk" in why


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("score", ["max", "mean", "lse"])
@pytest.mark.parametrize("grad", ["ste", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_topk_kernels_on_gpu_at_large_shapes(score, grad, dtype):
    """Compiled for the GPU at its tiles: k = 3 of 128-token chunks over 2,125 tokens, four query
    heads on two key/value heads, with the STE gate and without."""
    key = topk_key(score, k=3, chunk=128, heads=4, kv_groups=2, dk=64, dv=64, grad=grad)
    inputs = make_inputs(2, 2048 + 77, 4, 64, 64, kv_heads=2, data="float", magnitude=1.0, seed=0, duplicate=False,
                         dtype=dtype)
    errors = top1.compare(key, *[t.cuda() for t in inputs])
    print(f"top-3 of 128 {score} {grad} D=64 {dtype}: " + ", ".join(f"{name} {err:.1e}" for name, err in errors.items()))
    assert all(e <= top1.TOLERANCE[dtype] for e in errors.values()), errors


@FAST
@given(kind=data_kinds, k=st.sampled_from([2, 3]), split=st.sampled_from([2, 4]),
       length=st.sampled_from(["short", "k+1", "odd", "many"]), groups=st.sampled_from([(2, 2), (4, 2)]),
       sink=st.sampled_from([0, 0, 5, 40]), share=st.sampled_from(["head", "group"]))
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=31), k=2, split=4, length="many", groups=(4, 2),
         sink=0, share="head")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=32), k=3, split=2, length="odd", groups=(2, 2),
         sink=0, share="head")
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=35), k=2, split=2, length="many", groups=(4, 2),
         sink=40, share="head")
# chosen per key/value group: the per-group pass over the tiles of the group's chunks
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=36), k=2, split=4, length="many", groups=(4, 2),
         sink=0, share="group")
def test_chunks_longer_than_a_tile_are_attended_as_tiles(monkeypatch, kind, k, split, length, groups, sink, share):
    """MoBA's chunks longer than a tile (512 tokens at 8K): the selection ranks whole chunks by
    their mean key, the attention kernels take each chosen chunk's tiles and the own chunk's
    earlier tiles. Tiles of 16 here (the GPU's are 128), chunks of 32 or 64, against the
    reference of the whole-chunk selection; with sink tokens, those outside every attended
    tile; with the chunks chosen per key/value group."""
    from seqdsl.ir import support as table

    monkeypatch.setattr(table, "TRITON_MAX_CHUNK", 16)
    chunk = 16 * split
    T = {"short": chunk - 3, "k+1": (k + 1) * chunk + 1, "odd": (k + 2) * chunk - 5, "many": (k + 3) * chunk + 7}[length]
    H, HK = groups
    # temperature 1.25: a key no other test binds (the ops of a key are registered once per process)
    key = dataclasses.replace(topk_key("mean", k=k, chunk=chunk, heads=H, kv_groups=HK, sink=sink, share=share),
                              temperature=1.25)
    assert table.chunk_split(key.select) == split
    assert table.attention_key(key).select.k == k * split + split - 1
    if kind["data"] == "grid":
        key = dataclasses.replace(key, scale=0.25)
    assert_matches(key, make_inputs(1, T, H, 16, 16, kv_heads=HK, **kind))


def test_long_chunks_are_split_only_where_the_choice_reads_mean_keys_alone():
    """Chunks past one tile: top-k by mean keys, own chunk on, no gradient through the choice
    (the selection then reads only the means); any other such selection keeps the reference
    with the reason, and so does a split past the attended-tile limit."""
    ok = topk_key("mean", k=3, chunk=512)
    assert support.triton(ok).op == "triton.topk_chunk"
    assert support.attention_key(ok).select.chunk == 128 and support.attention_key(ok).select.k == 3 * 4 + 3
    for changed in (dict(score="max"), dict(local=False), dict(grad="ste"), dict(k=1)):
        refused = dataclasses.replace(ok, select=dataclasses.replace(ok.select, **changed))
        assert "longer than one tile" in support.triton(refused).reason, changed
    assert "not a power of two" in support.triton(topk_key("mean", k=3, chunk=2048)).reason
    assert "tiles of 128" in support.triton(topk_key("mean", k=16, chunk=1024)).reason


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk,sink,grad", [(128, 4, "none"), (64, 100, "ste")])
def test_chunk_sinks_on_gpu_at_large_shapes(dtype, chunk, sink, grad):
    """Sink tokens at the GPU's tiles: MoBA's 4 sinks in chunk 0 of 128 tokens, and 100 sinks
    over two 64-token chunks with the STE gate, top-3, four query heads on two key/value heads."""
    key = topk_key("mean", k=3, chunk=chunk, heads=4, kv_groups=2, dk=64, dv=64, grad=grad, sink=sink)
    inputs = make_inputs(2, 2048 + 77, 4, 64, 64, kv_heads=2, data="float", magnitude=1.0, seed=0, duplicate=False,
                         dtype=dtype)
    errors = top1.compare(key, *[t.cuda() for t in inputs])
    print(f"top-3 of {chunk} sink {sink} {grad} D=64 {dtype}: " + ", ".join(f"{n} {e:.1e}" for n, e in errors.items()))
    assert all(e <= top1.TOLERANCE[dtype] for e in errors.values()), errors


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k,chunk,heads,kv_groups,score", [(16, 64, 16, 1, "mean"), (3, 128, 4, 2, "lse")])
def test_chunks_chosen_per_group_on_gpu_at_large_shapes(dtype, k, chunk, heads, kv_groups, score):
    """share = group at the GPU's tiles: NSA's selected branch (16 of 64-token chunks, 16 query
    heads on one key/value head) and a MoBA-like grouping (3 of 128, four heads on two)."""
    key = topk_key(score, k=k, chunk=chunk, heads=heads, kv_groups=kv_groups, dk=64, dv=64, share="group")
    inputs = make_inputs(1, 2048 + 77, heads, 64, 64, kv_heads=kv_groups, data="float", magnitude=1.0, seed=0,
                         duplicate=False, dtype=dtype)
    errors = top1.compare(key, *[t.cuda() for t in inputs])
    print(f"top-{k} of {chunk} shared by {heads // kv_groups} heads {score} D=64 {dtype}: "
          + ", ".join(f"{n} {e:.1e}" for n, e in errors.items()))
    assert all(e <= top1.TOLERANCE[dtype] for e in errors.values()), errors


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_chunks_on_gpu_at_large_shapes(dtype):
    """MoBA at 8K: k = 3 of 512-token chunks (attended as 128-token tiles) over 2,637 tokens, four
    query heads on two key/value heads."""
    key = topk_key("mean", k=3, chunk=512, heads=4, kv_groups=2, dk=64, dv=64)
    inputs = make_inputs(1, 5 * 512 + 77, 4, 64, 64, kv_heads=2, data="float", magnitude=1.0, seed=0, duplicate=False,
                         dtype=dtype)
    errors = top1.compare(key, *[t.cuda() for t in inputs])
    print(f"top-3 of 512 mean none D=64 {dtype}: " + ", ".join(f"{name} {err:.1e}" for name, err in errors.items()))
    assert all(e <= top1.TOLERANCE[dtype] for e in errors.values()), errors
