"""The generated top-k element kernels (k > 1, grad = none or the STE; kernels/topk_element.py)
against the float64 reference (seqdsl/reference/top1.py: `topk_element_ref`): outputs and dq, dk,
dv under the interpreter on CPU, decoding, the ops' fake implementations, and on a GPU at larger
shapes."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from seqdsl.ir import support
from seqdsl.kernels import top1, topk_element
from seqdsl import custom_ops
from tests.kernels.keys import variant
from tests.kernels.test_top1_kernels import DEVICES, FAST, assert_matches, data_kinds, make_inputs


def element_key(k: int, *, heads: int = 2, kv_groups: int = 2, dk: int = 16, dv: int = 16, scale: float | None = None,
                grad: tuple[str, str] = ("none", "hard"), temperature: float = 1.0):
    key = variant("top1_element", dk=dk, dv=dv, k=k, grad=grad[0], value_grad=grad[1], scale=scale,
                  temperature=temperature)
    return dataclasses.replace(key, heads=heads, kv_groups=kv_groups)


@FAST
@given(kind=data_kinds, k=st.sampled_from([2, 3, 16, 17]), T=st.sampled_from([1, 5, 33, 40]),
       groups=st.sampled_from([(2, 2), (4, 2), (3, 1)]), dims=st.sampled_from([(16, 16), (32, 16)]))
# ties between keys (duplicated keys on the grid: the lower index is chosen, as the reference's
# stable sort), fewer visible keys than k (all attended), k past one 16-key tile, k = 64
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=41), k=3, T=40, groups=(4, 2), dims=(16, 16))
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=42), k=17, T=40, groups=(2, 2), dims=(16, 16))
@example(kind=dict(data="float", magnitude=30.0, duplicate=False, seed=43), k=64, T=70, groups=(3, 1), dims=(32, 64))
@example(kind=dict(data="float", magnitude=1e-3, duplicate=False, seed=44), k=2, T=33, groups=(2, 2), dims=(16, 16))
def test_topk_element_kernels_match_reference(kind, k, T, groups, dims):
    H, HK = groups
    key = element_key(k, heads=H, kv_groups=HK, dk=dims[0], dv=dims[1], scale=0.25 if kind["data"] == "grid" else None)
    assert_matches(key, make_inputs(1, T, H, dims[0], dims[1], kv_heads=HK, **kind))


@FAST
@given(kind=data_kinds, k=st.sampled_from([2, 5, 17]), T=st.sampled_from([1, 9, 40, 70]),
       window=st.sampled_from([1, 3, 16, 21, 50]), sink=st.sampled_from([0, 1, 4, 17]))
# a window of one key (the query itself) with sinks and ties among duplicated keys; sinks over a
# whole tile of 16 and a window starting inside the sink tiles
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=45), k=5, T=70, window=1, sink=4)
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=46), k=17, T=70, window=21, sink=17)
def test_topk_element_kernels_with_a_window_and_sinks_match_reference(kind, k, T, window, sink):
    """`visibility = window(w, sink = n)` under top-k element selection: the k best among the
    window's keys and the first n (the reference's visibility_mask); grouped heads are the test
    above's (the window does not touch them)."""
    key = dataclasses.replace(element_key(k, heads=2, kv_groups=1, scale=0.25 if kind["data"] == "grid" else None),
                              visibility="window", window=window, sink=sink)
    assert_matches(key, make_inputs(1, T, 2, 16, 16, kv_heads=1, **kind))


@FAST
@given(kind=data_kinds, k=st.sampled_from([2, 5, 17]), T=st.sampled_from([1, 9, 33, 40]),
       value_grad=st.sampled_from(["hard", "soft"]), groups=st.sampled_from([(2, 2), (4, 2), (2, 1)]),
       temperature=st.sampled_from([0.5, 1.0]), window=st.sampled_from([None, (7, 2), (20, 0)]))
# ties among duplicated keys (the chosen set and dv follow the lowest index), fewer visible keys
# than k (w_sel = p: the STE's gradient is then the dense softmax's), a window with sinks
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=47), k=5, T=40, value_grad="hard",
         groups=(4, 2), temperature=1.0, window=None)
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=48), k=17, T=9, value_grad="soft",
         groups=(2, 1), temperature=0.5, window=None)
@example(kind=dict(data="float", magnitude=30.0, duplicate=False, seed=49), k=2, T=40, value_grad="hard",
         groups=(2, 2), temperature=1.0, window=(7, 2))
def test_topk_element_ste_matches_reference(kind, k, T, value_grad, groups, temperature, window):
    """grad = ste: the choice's output; dq and dk through the surrogate (a softmax over every
    visible key, the Top-1 element kernels' dense pass); dv = w_sel^T dO (hard) or p^T dO (soft)."""
    H, HK = groups
    key = element_key(k, heads=H, kv_groups=HK, grad=("ste", value_grad), temperature=temperature,
                      scale=0.25 if kind["data"] == "grid" else None)
    if window is not None:
        key = dataclasses.replace(key, visibility="window", window=window[0], sink=window[1])
    assert_matches(key, make_inputs(1, T, H, 16, 16, kv_heads=HK, **kind))


@pytest.mark.parametrize("device", DEVICES)
def test_topk_element_decode_with_a_window_and_sinks(device):
    """Decoding (one query at L - 1) sees the same window and sinks as the full forward's last row."""
    key = dataclasses.replace(element_key(3, heads=2, kv_groups=1, scale=0.25), visibility="window", window=7, sink=2)
    for L in (1, 5, 9, 40):
        q, k, v, _ = make_inputs(1, L, 2, 16, 16, kv_heads=1, data="grid", magnitude=1.0, seed=L, duplicate=True)
        want = top1.reference(key, q.double(), k.double(), v.double())[:, -1:]
        got = top1.decode(key, *(t.to(device) for t in (q[:, -1:], k, v)))
        assert ((got.double().cpu() - want).norm() / want.norm()).item() < 1e-6, L


@pytest.mark.parametrize("groups, cap, scratch_rows", [(1, 16, None), (4, 16, 16), (64, 32, 16)],
                         ids=["exact-bound", "overflow-merges-every-tile", "several-launches"])
def test_the_selects_ways_to_a_choice_agree(monkeypatch, groups, cap, scratch_rows):
    """The select (codegen/templates/topk_element.py.jinja) by each of its ways, against the
    reference: a bound from single keys (exactly TOPK candidates), a bound over groups whose
    candidates overflow a CAP of KSLOTS (every tile merged instead), and the queries selected in
    several launches sharing one scratch of 16 rows."""
    key = element_key(16, heads=2, kv_groups=1, dk=16, dv=16)
    monkeypatch.setattr(topk_element, "bound_shape", lambda key: (groups, cap))
    if scratch_rows:
        monkeypatch.setattr(topk_element, "SCRATCH_BYTES", 8 * cap * 2 * scratch_rows)  # B * H = 2
    assert_matches(key, make_inputs(1, 70, 2, 16, 16, kv_heads=1, data="float", magnitude=1.0, seed=5, duplicate=False))


@pytest.mark.parametrize("device", DEVICES)
def test_topk_element_decode_matches_last_row_of_the_full_forward(device):
    """One query at position L - 1 against the cache, four query heads on two key/value heads
    read in place (a cache repeated per query head gives the same answer)."""
    key = element_key(5, heads=4, kv_groups=2, scale=0.25)
    for L in (1, 4, 6, 40):
        q, k, v, _ = make_inputs(1, L, 4, 16, 16, kv_heads=2, data="grid", magnitude=1.0, seed=L, duplicate=True)
        want = top1.reference(key, q.double(), k.double(), v.double())[:, -1:]
        q, k, v = (t.to(device) for t in (q, k, v))
        got = top1.decode(key, q[:, -1:], k, v)
        assert ((got.double().cpu() - want).norm() / want.norm()).item() < 1e-6, L
        repeated = top1.decode(key, q[:, -1:], k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2))
        assert torch.equal(got, repeated), L


def test_support_table_admits_top_k_elements_up_to_64_with_or_without_the_ste():
    assert support.triton(element_key(2)).op == "triton.topk_element"
    assert support.triton(element_key(64)).op == "triton.topk_element"
    assert "at most 64" in support.triton(element_key(65)).reason
    assert support.triton(element_key(4, grad=("ste", "soft"))).op == "triton.topk_element"
    window = dataclasses.replace(element_key(4), visibility="window", window=8, sink=2)
    assert support.triton(window).op == "triton.topk_element"


@pytest.mark.parametrize("grad", [("none", "hard"), ("ste", "hard")], ids=["none", "ste"])
def test_the_top_k_element_ops_pass_opcheck(grad):
    """torch.compile traces the custom ops with their fake implementations."""
    key = element_key(6, heads=2, kv_groups=1, dk=16, dv=32, grad=grad)
    ops = top1.bind(key).ops
    q, k, v, do = make_inputs(1, 20, 2, 16, 32, kv_heads=1, data="float", magnitude=1.0, seed=2, duplicate=False)
    slug = key.slug()
    torch.library.opcheck(custom_ops.op(f"{slug}_train"), tuple(t.requires_grad_() for t in (q, k, v)))
    o, *saved = ops.train(q, k, v)
    torch.library.opcheck(custom_ops.op(f"{slug}_bwd"),
                          tuple(t.detach() for t in (q, k, v, o, do, *saved)))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("k", [16, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window, sink", [(None, 0), (700, 20)], ids=["full", "window700-sink20"])
@pytest.mark.parametrize("grad", [("none", "hard"), ("ste", "hard")], ids=["none", "ste"])
def test_topk_element_kernels_on_gpu_at_large_shapes(k, dtype, window, sink, grad):
    """Compiled for the GPU at its tiles: k of 2,125 keys (or of a 700-key window and 20 sink
    tokens, the sinks inside a tile the window also reaches early on), four query heads on two
    key/value heads."""
    key = element_key(k, heads=4, kv_groups=2, dk=64, dv=64, grad=grad)
    if window is not None:
        key = dataclasses.replace(key, visibility="window", window=window, sink=sink)
    inputs = make_inputs(2, 2048 + 77, 4, 64, 64, kv_heads=2, data="float", magnitude=1.0, seed=0, duplicate=False,
                         dtype=dtype)
    errors = top1.compare(key, *[t.cuda() for t in inputs])
    print(f"top-{k} element D=64 {dtype} window={window} sink={sink} grad={grad[0]}: " + ", ".join(f"{name} {err:.1e}" for name, err in errors.items()))
    assert all(e <= top1.TOLERANCE[dtype] for e in errors.values()), errors
