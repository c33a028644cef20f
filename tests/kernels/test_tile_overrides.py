"""SEQDSL_TOP1_TILES (kernels/launch.py): a tuning override of the Top-1 kernels' tile sizes.

It must reach every launch site it names, leave the results exact for every tile shape it accepts
(diagonal tiles, partial tiles, unequal query and key tiles), and refuse a malformed value, or a
shape a kernel cannot take, with one readable message naming what is wrong. Kernels run under the Triton
interpreter on CPU (tests/kernels/conftest.py).
"""

from __future__ import annotations

import json

import pytest
import torch

from seqdsl.errors import SeqError
from seqdsl.kernels import launch, top1
from tests.kernels.keys import variant
from tests.kernels.test_top1_kernels import TOL, make_inputs


def _recording(monkeypatch) -> list[tuple[str, dict]]:
    """Every (site, tiles) the runtimes launch with, through the real `tuned`."""
    seen, real = [], launch.tuned

    def spy(site, cfg):
        out = real(site, cfg)
        seen.append((site, out))
        return out

    monkeypatch.setattr(launch, "tuned", spy)
    return seen


# the interpreter's defaults are 16 x 16 (forward, chunks) and 16 x 32 / 32 x 16 (element
# backward): the overrides change them, so other diagonal and partial-tile cases run
ELEMENT = {"element.fwd": {"BLOCK_M": 32, "BLOCK_N": 16}, "element.bwd_dkdv": {"BLOCK_M": 16, "BLOCK_N": 64},
           "element.bwd_dq": {"BLOCK_M": 16, "BLOCK_N": 32}, "element.value_grad": {"BLOCK_M": 32, "BLOCK_N": 32}}
# dq added by the dk/dv kernel (atomics), its query tiles unequal to the key tiles
FUSED_DQ = {"element.bwd_dkdv": {"BLOCK_M": 16, "BLOCK_N": 64, "FUSE_DQ": 1}}
CHUNK = {"chunk.fwd": {"BLOCK_M": 32}, "chunk.bwd": {"BLOCK_M": 32, "num_warps": 8}}
# the gate kernels' own site: 16 mean keys per tile, 32-query blocks, 256-query slices of gate_dkbar
GATE = {**CHUNK, "chunk.gate": {"BLOCK_M": 32, "BLOCK_C": 16, "SPLIT_ROWS": 256}}
# the top-k chunk kernels' sites (selection, attention forward, backward over pairs with dq_sum, STE gate)
TOPK = {"topk_chunk.select": {"BLOCK_M": 32}, "topk_chunk.fwd": {"BLOCK_M": 32, "num_warps": 2},
        "topk_chunk.bwd": {"BLOCK_M": 32, "num_warps": 8}, "topk_chunk.gate": {"BLOCK_M": 32}}


@pytest.mark.parametrize("base,override,extra", [
    ("top1_element", ELEMENT, {"grad": "ste", "value_grad": "hard"}),
    ("top1_element", FUSED_DQ, {"grad": "ste", "value_grad": "soft"}),
    ("top1_chunk_exact", CHUNK, {"chunk": 32}),
    ("top1_chunk_approx", CHUNK, {"chunk": 32}),
    ("top1_chunk_exact", GATE, {"chunk": 32}),
    ("top1_chunk_approx", GATE, {"chunk": 32}),
    ("top1_chunk_approx", TOPK, {"chunk": 32, "k": 2, "grad": "ste"}),
], ids=["element", "element-fused-dq", "exact", "approx", "exact-gate", "approx-gate", "topk-chunk"])
def test_overridden_tiles_reach_every_named_site_and_stay_exact(monkeypatch, base, override, extra):
    monkeypatch.setenv(launch.TILES_ENV, json.dumps(override))
    seen = _recording(monkeypatch)
    key = variant(base, dk=16, dv=16, **extra)
    errors = top1.compare(key, *make_inputs(1, 71, 2, 16, 16, data="grid", magnitude=1.0, seed=3, duplicate=True))
    assert max(errors.values()) <= TOL[torch.float32], errors
    for site, fields in override.items():
        used = [cfg for s, cfg in seen if s == site]
        assert used, f"{site} was never launched"
        assert all(cfg[name] == value for cfg in used for name, value in fields.items()), (site, used)


def test_without_the_variable_the_default_tiles_are_used(monkeypatch):
    monkeypatch.delenv(launch.TILES_ENV, raising=False)
    cfg = launch.tiles(64, torch.bfloat16, train=True)
    assert launch.tuned("element.fwd", cfg) is cfg


@pytest.mark.parametrize("raw,says", [
    ("{not json", "is not JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"element.fwdd": {"BLOCK_M": 64}}', "unknown launch site 'element.fwdd'"),
    ('{"element.fwd": 64}', "must map to an object"),
    ('{"chunk.fwd": {"BLOCK_N": 64}}', "chunk.fwd has no field 'BLOCK_N'"),
    ('{"element.bwd_dq": {"BLOCK_M": 48}}', "element.bwd_dq.BLOCK_M = 48 is not one of"),
    ('{"element.bwd_dq": {"num_warps": true}}', "num_warps = True is not one of"),
])
def test_a_malformed_override_is_one_readable_error(monkeypatch, raw, says):
    monkeypatch.setenv(launch.TILES_ENV, raw)
    with pytest.raises(launch.TileOverrideError) as caught:
        launch.tuned("element.fwd", launch.tiles(64, torch.bfloat16, train=True))
    assert isinstance(caught.value, SeqError) and says in str(caught.value)
    assert launch.TILES_ENV in str(caught.value)


def test_a_tile_shape_the_kernel_cannot_take_is_refused(monkeypatch):
    """bwd_dkdv's diagonal loop needs BLOCK_M | BLOCK_N: 32 queries against 16 keys would count
    the rows past the key block twice (dk 0.37 off, measured before the rule existed)."""
    monkeypatch.setenv(launch.TILES_ENV, json.dumps({"element.bwd_dkdv": {"BLOCK_M": 32, "BLOCK_N": 16}}))
    with pytest.raises(launch.TileOverrideError, match="BLOCK_M must divide BLOCK_N"):
        launch.tuned("element.bwd_dkdv", launch.backward_tiles(64, torch.bfloat16)[0])


def test_gate_slices_and_mean_key_tiles_partition_the_queries_exactly(monkeypatch):
    """gate_dkbar's programs each add one slice of SPLIT_ROWS queries into a tile of BLOCK_C mean
    keys (float32 atomics): with 600 queries in slices of 256 (the last one partial) and 38 complete
    chunks in tiles of 16, a query counted twice or missed would move dk off the reference."""
    monkeypatch.setenv(launch.TILES_ENV, json.dumps({"chunk.gate": {"BLOCK_M": 16, "BLOCK_C": 16, "SPLIT_ROWS": 256}}))
    seen = _recording(monkeypatch)
    key = variant("top1_chunk_approx", dk=16, dv=16, chunk=16)
    errors = top1.compare(key, *make_inputs(1, 600, 1, 16, 16, data="grid", magnitude=1.0, seed=5, duplicate=False))
    assert max(errors.values()) <= TOL[torch.float32], errors
    assert any(site == "chunk.gate" and cfg["SPLIT_ROWS"] == 256 for site, cfg in seen)


def test_every_launch_site_the_runtimes_name_is_known():
    """`tuned` refuses a site SITES lacks (the override could never reach it): each kernel module's
    sites are in SITES (the top-k chunk kernels' were not, and their tiles could not be swept)."""
    import re
    from pathlib import Path

    named = set()
    for path in (Path(__file__).resolve().parents[2] / "kernels").glob("*.py"):
        named |= set(re.findall(r'tuned\("([a-z_0-9]+\.[a-z_0-9]+)"', path.read_text()))
    assert {"topk_chunk.fwd", "topk_chunk.bwd", "topk_chunk.gate", "element.fwd"} <= named
    assert named <= set(launch.SITES)
    with pytest.raises(ValueError, match="not in kernels/launch.py"):
        launch.tuned("topk_chunk.nowhere", {})


@pytest.mark.parametrize("n_buckets", [1, 5, 254, 255, 300, 32766, 32767, 40000])
def test_bucket_groups_rows_by_id_stably_whatever_the_key_width(n_buckets):
    """launch.bucket sorts ids + 1 in the narrowest integer type (uint8, int16, int32): the same
    stable grouping as an int64 sort, with -1 rows first and each id's start."""
    gen = torch.Generator().manual_seed(n_buckets)
    high = min(n_buckets, 7) if n_buckets < 255 else n_buckets  # few ids: many ties, stability shows
    ids = torch.randint(-1, high, (3, 500), generator=gen, dtype=torch.int32)
    ids[0, :4] = n_buckets - 1  # the largest id, where a narrow key would wrap
    perm, starts = launch.bucket(ids, n_buckets)
    want = torch.sort(ids.long(), dim=-1, stable=True).indices
    assert perm.dtype == starts.dtype == torch.int32
    assert torch.equal(perm.long(), want)
    # starts[c]: the rows before id c's, i.e. the -1 rows and ids below c (the last: every row)
    counts = torch.stack([torch.bincount(row.long() + 1, minlength=n_buckets + 1) for row in ids])
    assert torch.equal(starts.long(), counts.cumsum(1))
