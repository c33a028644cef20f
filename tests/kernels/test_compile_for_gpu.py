"""Every generated kernel compiles for a Hopper GPU (CUDA sm_90) on this CPU machine.

The interpreter tests run the kernels as Python, which accepts programs Triton's compiler
refuses: on 2026-11-27 the top-k STE gate's `g` rebound the grouped-query loop's `g` (a
loop-carried variable changing type), green on CPU and a compile error on the first GPU run.
Here each kernel a CPU run launches (forward, backward, decoding) goes through Triton's compiler
for sm_90 with the argument types and constants of that launch (tests/kernels/gpu_compile.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
from unittest import mock

import pytest

from seqdsl.kernels import launch, top1
from tests.kernels.gpu_compile import compile_all, record
from tests.kernels.keys import variant
from tests.kernels.test_top1_kernels import make_inputs


def _keys():
    """(name, key, kv_heads, element backward with dq fused) covering each template's branches:
    element (windowed with sinks, both backward layouts), top-k element (all keys; a window and sinks;
    the STE, hard and soft),
    chunk Exact/Approx with and without the gate and the own chunk, top-k chunk with each score and
    gradient, grouped heads, chunks chosen per key/value group, the sorted selection (k > 4)."""
    element = variant("top1_element", dk=16, dv=16)
    yield "element", element, 2, 0
    yield "element_fused_dq", element, 2, 1
    yield "element_window_sink", dataclasses.replace(element, visibility="window", window=5, sink=2), 2, 0
    yield "element_no_grad", variant("top1_element", dk=16, dv=16, grad="none"), 2, 0
    for k in (8, 64):  # top-k elements: a 16-wide and a 64-wide sorted list
        yield f"element_top{k}", variant("top1_element", dk=16, dv=32, k=k, grad="none"), 2, 0
    yield "element_top8_window_sink", dataclasses.replace(variant("top1_element", dk=16, dv=32, k=8, grad="none"),
                                                          visibility="window", window=5, sink=2), 2, 0
    # the STE: attn_bwd with dv alone (hard) and the surrogate's Top-1 element kernels; soft dv
    # from the surrogate under a window with sinks
    yield "element_top8_ste", variant("top1_element", dk=16, dv=32, k=8), 2, 0
    yield "element_top8_ste_soft_window_sink", dataclasses.replace(
        variant("top1_element", dk=16, dv=32, k=8, value_grad="soft"), visibility="window", window=5, sink=2), 2, 0
    for base in ("top1_chunk_exact", "top1_chunk_approx"):
        yield base, variant(base, dk=16, dv=32, chunk=16), 2, 0
        yield f"{base}_no_local_no_grad", variant(base, dk=16, dv=32, chunk=16, local=False, grad="none"), 2, 0
        # MoBA's 512-token chunks: chosen whole (the select kernel's CHUNK is 512), attended in tiles
        if base == "top1_chunk_approx":
            yield "moba_chunk_512", variant(base, dk=16, dv=32, chunk=512, k=3, grad="none"), 2, 0
        for grad in ("none", "ste"):
            for local in (True, False):
                yield (f"{base}_top3_{grad}_{'local' if local else 'no_local'}",
                       variant(base, dk=16, dv=32, chunk=16, k=3, grad=grad, local=local), 2, 0)
        # chunks chosen per key/value group (NSA's shared selection): select_shared, and with two
        # query heads on each key/value head the attention per (query, group)
        yield f"{base}_top3_shared", variant(base, dk=16, dv=32, chunk=16, k=3, grad="none", share="group"), 2, 0
    # mean keys with k > 4: the selection's sorted ranks (codegen/choices.py, sorted_select), with the
    # own chunk as a candidate and the STE gate's scores read back; and chosen per group
    yield "approx_top8_ste_no_local", variant("top1_chunk_approx", dk=16, dv=32, chunk=16, k=8, local=False), 2, 0
    yield "approx_top8_shared", variant("top1_chunk_approx", dk=16, dv=32, chunk=16, k=8, grad="none",
                                        share="group"), 2, 0
    yield "lse_top3_shared", variant("top1_chunk_exact", dk=16, dv=32, chunk=16, k=3, grad="none", score="lse",
                                     share="group"), 1, 0


def _launches() -> list[dict]:
    """The launches of a forward, backward and decoding step of each key, with the GPU's tile
    sizes (the interpreter's own are smaller than a GPU's dot accepts), float32 inputs."""
    launches: list[dict] = []
    launch.interpreted()  # patches the interpreter once (launch._interpreter_index_fix)
    with record(launches), mock.patch.object(launch, "interpreted", lambda: False):
        for _, key, kv_heads, fuse_dq in _keys():
            key = dataclasses.replace(key, heads=4, kv_groups=kv_heads)  # two query heads per key/value head
            q, k, v, do = make_inputs(1, 40, 4, key.key_dim, key.value_cols, kv_heads=kv_heads, data="float",
                                      magnitude=1.0, seed=1, duplicate=False)
            with mock.patch.dict(os.environ, {launch.TILES_ENV: json.dumps({"element.bwd_dkdv": {"FUSE_DQ": fuse_dq}})}):
                top1.compare(key, q, k, v, do)  # forward and backward
                top1.decode(key, q[:, -1:], k, v)
    return launches


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="a GPU run compiles every kernel it launches")
def test_every_generated_kernel_compiles_for_sm90():
    launches = _launches()
    slugs = {dataclasses.replace(key, heads=4, kv_groups=kv).slug() for _, key, kv, _ in _keys()}
    assert all(any(entry["name"].startswith(slug) for entry in launches) for slug in slugs)  # every key ran
    result = compile_all(launches)
    assert not result["failed"], "\n\n".join(f"{f['name']} {f['constants']}:\n{f['error']}" for f in result["failed"])
    assert result["compiled"] == len(launches)
