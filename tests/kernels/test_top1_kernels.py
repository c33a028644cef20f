"""The generated Top-1 kernels against the float64 reference (seqdsl/reference/top1.py).

Outputs and every gradient (dq, dk, dv), norm-relative, over random batch, heads, lengths
(T = 1, T < chunk, T = k * chunk +- 1, lengths no tile divides), head dims 16-128, every gradient
mode, temperatures, and adversarial inputs: "grid" data (multiples of 1/8 with power-of-two scale
and temperature, so every score is exact in float32 and float64 and ties are everywhere, within
and across chunks, duplicated keys included), and float data at tiny and huge magnitudes.
On CPU the kernels run under TRITON_INTERPRET=1 (tests/kernels/conftest.py): shapes stay small.
"""

from __future__ import annotations

import dataclasses
import json
import os
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seqdsl.ir.key import shared_kv_group
from seqdsl.kernels import launch, top1
from tests.kernels.keys import spec_key, variant

FAST = settings(max_examples=5, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
TOL = {torch.float32: 1e-5, torch.float16: 5e-3}


def make_inputs(B, T, H, dk, dv, *, data: str, magnitude: float, seed: int, duplicate: bool, dtype=torch.float32,
                kv_heads: int | None = None):
    """q, k, v, dO; k and v with `kv_heads` heads (grouped-query attention) when given."""
    gen = torch.Generator().manual_seed(seed)
    HK = H if kv_heads is None else kv_heads
    shapes = [(B, T, H, dk), (B, T, HK, dk), (B, T, HK, dv), (B, T, H, dv)]
    if data == "grid":  # exact scores: ties are real ties in every precision
        q, k, v, do = (torch.randint(-8, 9, s, generator=gen).float() / 8 for s in shapes)
    else:
        q, k, v, do = (torch.randn(*s, generator=gen) for s in shapes)
        q = q * magnitude
    # duplicated keys: a later copy of an earlier key ties with it. Grid data only: with float data
    # a tie between a complete chunk's mean (q . mean k) and the own chunk's partial mean (mean of
    # q . k) is decided by rounding, in the reference as much as in a kernel
    if duplicate and data == "grid" and T > 2:
        k[:, T // 2:] = k[:, : T - T // 2].clone()  # the halves overlap when T is odd
    return [t.to(dtype) for t in (q, k, v, do)]


def assert_matches(key, inputs, dtype=torch.float32):
    errors = top1.compare(key, *inputs)
    bad = {name: err for name, err in errors.items() if not err <= TOL[dtype]}
    assert not bad, f"{key.select}: relative errors {errors}"


# The interpreter's time grows with B * H (one program per row and head), not with the head dims:
# a batch of 2 or 2 heads, not both, still puts every row and head at its own offset.
shapes = st.fixed_dictionaries(dict(
    BH=st.sampled_from([(1, 1), (1, 2), (2, 1)]),
    dk=st.sampled_from([16, 32, 64, 128]), dv=st.sampled_from([16, 32, 64])))
data_kinds = st.fixed_dictionaries(dict(
    data=st.sampled_from(["grid", "float"]), magnitude=st.sampled_from([1e-3, 1.0, 30.0]),
    duplicate=st.booleans(), seed=st.integers(0, 2**16)))


@FAST
@given(shape=shapes, kind=data_kinds, T=st.sampled_from([1, 2, 15, 16, 17, 33, 47]),
       grad=st.sampled_from([("ste", "hard"), ("ste", "soft"), ("none", "hard")]),
       temperature=st.sampled_from([0.5, 1.0, 2.0]), fuse_dq=st.sampled_from([0, 1]))
def test_element_kernels_match_reference(shape, kind, T, grad, temperature, fuse_dq):
    """fuse_dq: dq from the dk/dv kernel's atomics instead of its own kernel (both are shipped)."""
    scale = 0.25 if kind["data"] == "grid" else None  # power of two keeps grid scores exact
    key = variant("top1_element", dk=shape["dk"], dv=shape["dv"], scale=scale, temperature=temperature,
                  grad=grad[0], value_grad=grad[1])
    # hypothesis runs many draws per test call: the environment is patched per draw, not by a fixture
    with mock.patch.dict(os.environ, {launch.TILES_ENV: json.dumps({"element.bwd_dkdv": {"FUSE_DQ": fuse_dq}})}):
        assert_matches(key, make_inputs(shape["BH"][0], T, shape["BH"][1], shape["dk"], shape["dv"], **kind))


@FAST
@given(shape=shapes, kind=data_kinds, T=st.sampled_from([1, 17, 33, 47]), window=st.sampled_from([1, 2, 5, 16, 18, 20]),
       sink=st.sampled_from([0, 1, 4, 17]), grad=st.sampled_from([("ste", "hard"), ("ste", "soft"), ("none", "hard")]),
       fuse_dq=st.sampled_from([0, 1]))
# a window shorter than a tile, sinks reaching into the second tile, queries past every tile the
# window reaches (T = 80: only the sinks reach the first key block from the query tiles past 36 on),
# both backward layouts
@example(shape=dict(BH=(1, 1), dk=16, dv=16), kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=3),
         T=80, window=5, sink=17, grad=("ste", "hard"), fuse_dq=0)
@example(shape=dict(BH=(1, 2), dk=32, dv=16), kind=dict(data="float", magnitude=1.0, duplicate=False, seed=4),
         T=33, window=20, sink=0, grad=("ste", "soft"), fuse_dq=1)
# windows of 2 and 18 put a window's first key at a tile's last position (the interpreter's tiles
# are 16): a loop bound off by one drops it; window 5 without sinks leaves rows with no visible key
# in their first tile (the forward's running maximum is still -inf there)
@example(shape=dict(BH=(1, 1), dk=16, dv=16), kind=dict(data="float", magnitude=1.0, duplicate=False, seed=5),
         T=47, window=2, sink=0, grad=("ste", "hard"), fuse_dq=0)
@example(shape=dict(BH=(1, 1), dk=16, dv=16), kind=dict(data="float", magnitude=1.0, duplicate=False, seed=6),
         T=47, window=18, sink=0, grad=("ste", "hard"), fuse_dq=0)
@example(shape=dict(BH=(1, 1), dk=16, dv=16), kind=dict(data="float", magnitude=1.0, duplicate=False, seed=7),
         T=47, window=5, sink=0, grad=("ste", "soft"), fuse_dq=0)
def test_element_kernels_under_a_window_with_sinks_match_reference(shape, kind, T, window, sink, grad, fuse_dq):
    """`window(w, sink=n)` with element selection: each query selects among i - w < j <= i and
    the sink tokens j < n; the kernels start their loops at the window (after the sink tiles)."""
    scale = 0.25 if kind["data"] == "grid" else None
    key = dataclasses.replace(
        variant("top1_element", dk=shape["dk"], dv=shape["dv"], scale=scale, grad=grad[0], value_grad=grad[1]),
        visibility="window", window=window, sink=sink)
    with mock.patch.dict(os.environ, {launch.TILES_ENV: json.dumps({"element.bwd_dkdv": {"FUSE_DQ": fuse_dq}})}):
        assert_matches(key, make_inputs(shape["BH"][0], T, shape["BH"][1], shape["dk"], shape["dv"], **kind))


@FAST
@given(kind=data_kinds, groups=st.sampled_from([(4, 2), (3, 1), (4, 1)]), T=st.sampled_from([17, 33, 47]),
       mixer=st.sampled_from(["element", "element_window", "chunk_exact", "chunk_approx"]),
       grad=st.sampled_from(["ste", "none"]), local=st.booleans(), fuse_dq=st.sampled_from([0, 1]))
# every chunk kernel with the gate (Approx's mean-key gradient summed over a group's heads in
# attn_bwd), and the element kernels with the window, once each whatever the draws
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=11), groups=(4, 2), T=47,
         mixer="chunk_approx", grad="ste", local=False, fuse_dq=0)
@example(kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=12), groups=(3, 1), T=33,
         mixer="chunk_exact", grad="ste", local=True, fuse_dq=0)
@example(kind=dict(data="float", magnitude=1.0, duplicate=False, seed=13), groups=(4, 2), T=47,
         mixer="element_window", grad="ste", local=False, fuse_dq=1)
def test_grouped_query_kernels_match_the_reference_on_repeated_heads(kind, groups, T, mixer, grad, local, fuse_dq):
    """H query heads share HK key/value heads (kv_groups = HK), read in place: outputs equal the
    reference's on the heads repeated, and dk, dv are the sums over each group's query heads."""
    H, HK = groups
    if mixer.startswith("element"):
        key = variant("top1_element", dk=16, dv=16, grad=grad)
        if mixer == "element_window":
            key = dataclasses.replace(key, visibility="window", window=5, sink=2)
    else:
        key = variant(f"top1_{mixer}", dk=16, dv=16, chunk=16, local=local, grad=grad)
    key = dataclasses.replace(key, heads=H, kv_groups=HK)
    inputs = make_inputs(1, T, H, 16, 16, kv_heads=HK, **kind)
    with mock.patch.dict(os.environ, {launch.TILES_ENV: json.dumps({"element.bwd_dkdv": {"FUSE_DQ": fuse_dq}})}):
        assert_matches(key, inputs)


def test_grouped_query_kernels_refuse_key_value_heads_the_key_does_not_share():
    key = dataclasses.replace(variant("top1_element", dk=16, dv=16), heads=4, kv_groups=2)
    q, k, v, _ = make_inputs(1, 9, 4, 16, 16, kv_heads=4, data="float", magnitude=1.0, seed=0, duplicate=False)
    with pytest.raises(ValueError, match="4 query heads take 2 key/value heads"):
        top1.run(key, q, k, v)


@FAST
@given(shape=shapes, kind=data_kinds, chunk=st.sampled_from([16, 32]),
       length=st.sampled_from(["one", "short", "k-1", "k", "k+1", "odd"]),
       score=st.sampled_from(["max", "mean"]), local=st.booleans(), grad=st.sampled_from(["ste", "none"]),
       temperature=st.sampled_from([0.5, 1.0, 2.0]))
# the five derandomized draws never take local = true across chunks: this case does
@example(shape=dict(BH=(1, 2), dk=32, dv=16), kind=dict(data="grid", magnitude=1.0, duplicate=True, seed=1),
         chunk=16, length="k+1", score="mean", local=True, grad="ste", temperature=1.0)
def test_chunk_kernels_match_reference(shape, kind, chunk, length, score, local, grad, temperature):
    T = {"one": 1, "short": chunk - 3, "k-1": 2 * chunk - 1, "k": 2 * chunk, "k+1": 2 * chunk + 1,
         "odd": 3 * chunk - 5}[length]
    scale = 0.25 if kind["data"] == "grid" else None
    key = variant("top1_chunk_exact", dk=shape["dk"], dv=shape["dv"], scale=scale, temperature=temperature,
                  chunk=chunk, score=score, local=local, grad=grad)
    assert_matches(key, make_inputs(shape["BH"][0], T, shape["BH"][1], shape["dk"], shape["dv"], **kind))


def test_approx_without_local_chunk_with_one_complete_chunk_matches_reference():
    """T = 2C - 1: one complete chunk, whose mean key the second chunk's queries score against
    their own partial chunk. The mean-key gradient was once skipped there (dk off by 5e-2)."""
    key = variant("top1_chunk_exact", dk=16, dv=32, chunk=16, score="mean", local=False)
    assert_matches(key, make_inputs(2, 31, 2, 16, 32, data="float", magnitude=1.0, seed=31, duplicate=False))


def test_element_value_gradient_when_most_queries_choose_one_key():
    """A "sink" key that nearly every query selects: the hard value gradient's segment for it
    spans many query tiles (value_grad kernel), the others are short or empty."""
    key = variant("top1_element", dk=16, dv=32)
    q, k, v, do = make_inputs(1, 70, 2, 16, 32, data="float", magnitude=1.0, seed=70, duplicate=False)
    k[:, 3] = 50 * q.mean(1)
    assert_matches(key, [q, k, v, do])


@pytest.mark.parametrize("spec", ["top1_element", "top1_chunk_exact", "top1_chunk_approx"])
def test_kernels_in_float16_match_reference(spec):
    chunk = {} if spec == "top1_element" else {"chunk": 16}
    key = variant(spec, dk=32, dv=32, **chunk)
    inputs = make_inputs(1, 37, 2, 32, 32, data="float", magnitude=1.0, seed=3, duplicate=False,
                         dtype=torch.float16)
    assert_matches(key, inputs, torch.float16)


# the decoding kernels compiled for a GPU (not interpreted) where one is present
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or bool(os.environ.get("TRITON_INTERPRET")), reason="needs a CUDA device")])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec,local", [("top1_element", False), ("top1_chunk_exact", True),
                                        ("top1_chunk_exact", False), ("top1_chunk_approx", True),
                                        ("top1_chunk_approx", False)])
def test_decode_matches_last_row_of_the_full_forward(spec, local, device):
    """One query at position L - 1 against the cache: the reference's last output row."""
    chunk = {} if spec == "top1_element" else {"chunk": 16, "local": local}
    key = variant(spec, dk=16, dv=32, **chunk)
    for L in (1, 16, 17, 40):
        # one batch row, two heads: the interpreter's time grows with B * H (see `shapes`)
        q, k, v, _ = make_inputs(1, L, 2, 16, 32, data="grid", magnitude=1.0, seed=L, duplicate=True)
        want = top1.reference(key, q.double(), k.double(), v.double())[:, -1:]
        got = top1.decode(key, *(t.to(device) for t in (q[:, -1:], k, v))).cpu()
        assert ((got.double() - want).norm() / want.norm()).item() < 1e-6, L


@pytest.mark.parametrize("device", DEVICES)
def test_decode_under_a_window_with_sinks_matches_last_row_of_the_full_forward(device):
    """Element selection with `window(5, sink=3)` decoding at L past the window's tiles: the
    newest query selects among its window and the sink tokens, as the reference's last row."""
    key = dataclasses.replace(variant("top1_element", dk=16, dv=32), visibility="window", window=5, sink=3)
    for L in (1, 4, 17, 40):
        q, k, v, _ = make_inputs(1, L, 2, 16, 32, data="grid", magnitude=1.0, seed=L, duplicate=True)
        want = top1.reference(key, q.double(), k.double(), v.double())[:, -1:]
        got = top1.decode(key, *(t.to(device) for t in (q[:, -1:], k, v))).cpu()
        assert ((got.double() - want).norm() / want.norm()).item() < 1e-6, L


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec,local", [("top1_element", False), ("top1_chunk_exact", True),
                                        ("top1_chunk_approx", False)])
def test_decode_reads_a_grouped_cache_in_place(spec, local, device):
    """Grouped-query decoding: four query heads on a cache of two key/value heads, read in place
    (query head h reads cache head h // 2), equal to the reference on the repeated cache; and a
    cache of any other head count is refused."""
    chunk = {} if spec == "top1_element" else {"chunk": 16, "local": local}
    key = dataclasses.replace(variant(spec, dk=16, dv=16, **chunk), heads=4, kv_groups=2)
    gen = torch.Generator().manual_seed(5)
    L = 37
    q = torch.randn(1, L, 4, 16, generator=gen)
    k, v = torch.randn(1, L, 2, 16, generator=gen), torch.randn(1, L, 2, 16, generator=gen)
    rep = [t.repeat_interleave(2, dim=2).double() for t in (k, v)]
    want = top1.reference(key, q.double(), *rep)[:, -1:].to(device)
    q, k, v = (t.to(device) for t in (q, k, v))
    got = top1.decode(key, q[:, -1:], k, v)
    assert ((got.double() - want).norm() / want.norm()).item() < 1e-6
    assert torch.equal(got, top1.decode(key, q[:, -1:], k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2)))
    with pytest.raises(ValueError, match="2 key/value heads for 4 query heads"):
        top1.decode(key, q[:, -1:], k[:, :, :1], v[:, :, :1])


def test_chunk_zero_query_with_local_attends_its_prefix_only():
    """A chunk-0 query with local = true has no candidates: plain causal attention on its prefix,
    and the gate is exactly 0 (no gradient into any chunk score)."""
    key = variant("top1_chunk_exact", dk=16, dv=16, chunk=16, local=True)
    q, k, v, do = make_inputs(1, 16, 1, 16, 16, data="float", magnitude=1.0, seed=0, duplicate=False)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * key.scale
    w = torch.softmax(scores.masked_fill(torch.ones(16, 16).triu(1).bool(), float("-inf")), -1)
    want = torch.einsum("bhij,bjhd->bihd", w, v)
    got = top1.run(key, q, k, v)
    assert ((got - want).norm() / want.norm()).item() < 1e-5


def test_self_check_passes_for_a_shipped_spec():
    key = variant("top1_chunk_approx", dk=16, dv=16, chunk=16)
    assert top1.self_check(key, torch.float32, torch.device("cpu")) == (True, "")


def test_the_self_check_of_a_window_reaches_past_the_window_and_its_sinks():
    """On a GPU the self-check is the first run of a window kernel: at the library's window spec
    it must leave the window (and the sink tiles) behind by more than a tile, or a wrong window
    bound would pass it."""
    key = spec_key("top1_element_window_256_sink4")
    assert (key.window, key.sink) == (256, 4)
    assert top1.check_length(key) > key.sink + key.window + 128
    assert top1.check_length(spec_key("top1_element")) == 77


def test_self_check_reports_a_wrong_kernel(tmp_path, monkeypatch):
    """A hand-edited kernel (SEQDSL_KERNEL_OVERRIDE) that drops the temperature is caught."""
    from seqdsl import codegen
    from seqdsl.kernels import cache

    key = variant("top1_element", dk=16, dv=16, temperature=0.5)
    source = codegen.render(key).source
    assert "FACTOR = tl.constexpr(" in source
    broken = source.replace(codegen.plan(key).hole("factor"), repr(key.scale * 1.4426950408889634), 1)
    (tmp_path / f"{key.slug()}.py").write_text(broken)
    monkeypatch.setenv("SEQDSL_KERNEL_OVERRIDE", str(tmp_path))
    cache.load.cache_clear()
    top1.self_check.cache_clear()
    try:
        with pytest.warns(UserWarning, match="hand-edited"):
            ok, detail = top1.self_check(key, torch.float32, torch.device("cpu"))
    finally:
        cache.load.cache_clear()
        top1.self_check.cache_clear()
    assert not ok and "differs from the reference" in detail


@pytest.mark.slow  # compile plumbing: importing torch._dynamo and tracing cost seconds per worker
def test_model_compiles_without_graph_breaks():
    """torch.compile(fullgraph=True) traces the planner's call, top1.run(key, ...), through the
    custom ops (forward and autograd) in one graph, once the key has been bound; the same code
    compiled for a second key (both bound first) runs that key's kernels, not the first's."""
    keys = [variant("top1_element", dk=16, dv=16), variant("top1_chunk_exact", dk=16, dv=16, chunk=16),
            variant("top1_chunk_approx", dk=16, dv=16, chunk=16),
            variant("top1_chunk_approx", dk=16, dv=16, chunk=16, k=3, grad="none"),  # top-k
            dataclasses.replace(variant("top1_element", dk=16, dv=16), heads=2, kv_groups=1)]  # grouped
    kernels = [top1.bind(key) for key in keys]
    for key, kernel in zip(keys, kernels):
        q, k, v, _ = make_inputs(1, 40, 2, 16, 16, data="float", magnitude=1.0, seed=1, duplicate=False,
                                 kv_heads=2 // shared_kv_group(key))
        leaves = [t.requires_grad_() for t in (q, k, v)]
        compiled = torch.compile(lambda a, b, c: top1.run(key, a, b, c).square().sum(), backend="eager",
                                 fullgraph=True)
        compiled(*leaves).backward()
        eager = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        kernel(*eager).square().sum().backward()
        for got, want in zip(leaves, eager):
            torch.testing.assert_close(got.grad, want.grad)


def test_unsupported_key_is_refused_with_the_support_tables_reason():
    key = variant("top1_chunk_exact", dk=16, dv=16, chunk=12)
    with pytest.raises(ValueError, match="power of two"):
        top1.bind(key)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("spec", ["top1_element", "top1_element_window_256_sink4", "top1_chunk_exact",
                                  "top1_chunk_approx", "top1_chunk_exact_gqa", "moba"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [64, 128])
def test_kernels_on_gpu_at_large_shapes(spec, dtype, dim):
    """Compiled for the GPU at its tiles (128 x 64 and up, not the interpreter's 16): the window's
    loops over 2,125 queries start past the sink tiles and skip every tile the window leaves; the
    grouped spec's 4 query heads read 2 key/value heads in place; MoBA keeps 3 of 16 chunks."""
    chunk = {"chunk": 128} if spec.startswith("top1_chunk") or spec == "moba" else {}
    key = variant(spec, dk=dim, dv=dim, **chunk)
    kv_heads = None
    if key.kv_groups < key.heads:  # the grouped spec at this test's 4 query heads
        key, kv_heads = dataclasses.replace(key, heads=4, kv_groups=2), 2
    inputs = make_inputs(2, 2048 + 77, 4, dim, dim, data="float", magnitude=1.0, seed=0, duplicate=False, dtype=dtype,
                         kv_heads=kv_heads)
    errors = top1.compare(key, *[t.cuda() for t in inputs])
    # the largest errors against float64 go to the log (pytest -s prints them as each test runs)
    print(f"{spec} D={dim} {dtype}: " + ", ".join(f"{name} {err:.1e}" for name, err in errors.items()))
    assert all(e <= top1.TOLERANCE[dtype] for e in errors.values()), errors


@pytest.mark.parametrize("kv_groups,relation,heads_seen", [(2, "dot", 2), (4, "dot", 4), (2, "random_keys", 4)])
def test_the_triton_backend_trains_grouped_keys_and_values_in_place(kv_groups, relation, heads_seen):
    """A whole sequence with a gradient: the kernels get the key/value heads as the key shares
    them (grouped-query attention: two heads for four query heads), repeated only where keys come
    one per query head (a random key table), and the output is the reference's."""
    from seqdsl.lower.backends import reference
    from seqdsl.lower.backends.triton import TritonBackend
    from seqdsl.lower.inputs import AttentionInputs

    key = dataclasses.replace(variant("top1_element", dk=16, dv=16), heads=4, kv_groups=kv_groups, relation=relation)
    gen = torch.Generator().manual_seed(4)
    m = AttentionInputs(q=torch.randn(1, 21, 4, 16, generator=gen, requires_grad=True),
                        k=torch.randn(1, 21, kv_groups, 16, generator=gen), v=torch.randn(1, 21, kv_groups, 16, generator=gen),
                        pos=0)
    seen = []
    kernel = top1.bind(key)
    got = TritonBackend().attend(key, "triton.top1_element", m,
                                 kernels=lambda q, k, v: seen.append((k.shape[2], v.shape[2])) or kernel(q, k, v))
    assert seen == [(heads_seen, heads_seen)]
    assert torch.allclose(got, reference.attention_reference(key, m), atol=1e-5)


def test_the_triton_backend_decodes_a_grouped_cache_without_repeating_it(monkeypatch):
    """seqdsl/lower's decoding step hands the generated decode kernel the cache as stored (two
    key/value heads for four query heads), and the answer is the reference's."""
    from seqdsl.lower.backends import reference
    from seqdsl.lower.backends.triton import TritonBackend
    from seqdsl.lower.inputs import AttentionInputs

    key = dataclasses.replace(variant("top1_element", dk=16, dv=16), heads=4, kv_groups=2)
    gen = torch.Generator().manual_seed(9)
    m = AttentionInputs(q=torch.randn(1, 1, 4, 16, generator=gen), k=torch.randn(1, 21, 2, 16, generator=gen),
                        v=torch.randn(1, 21, 2, 16, generator=gen), pos=20)
    seen = []
    real = top1.decode
    monkeypatch.setattr(top1, "decode", lambda key, q, k, v: seen.append(k.shape[2]) or real(key, q, k, v))
    with torch.no_grad():
        got = TritonBackend().attend(key, "triton.top1_element", m)
        want = reference.attention_reference(key, m)
    assert seen == [2]
    assert torch.allclose(got, want, atol=1e-5)
