"""benchmarks/bench_topk.py --smoke --check on the CPU: the check proves the FlexAttention block
mask (both mask encodings, the tile lists) and fla's block indices encode seqdsl's top-k chunk
selection, against seqdsl's reference; the JSON has every case with its SDPA baseline. The timings
mean nothing here. Two more tests break the selection and the tiles on purpose: the check fails."""

from __future__ import annotations

import json

import pytest

from tests.docs_generator import load_script


def _script():
    return load_script("benchmarks/bench_topk.py", "bench_topk")


@pytest.mark.slow
def test_smoke_check_matches_the_reference_and_writes_every_case(tmp_path):
    bench = _script()
    # the element cases' generated kernels take minutes a call under the interpreter: the chunk cases here
    chunked = [name for name, case in bench.CASES.items() if not case.element]
    assert bench.main(["--smoke", "--check", "--cases", ",".join(chunked), "--out", str(tmp_path)]) == 0
    result = json.loads(next(tmp_path.glob("bench_topk_smoke_*.json")).read_text())
    assert result["partial"] is False

    check = result["check"]
    flex = [c for c in check if c["check"] == "flex"]
    # every case (and local = false) in both encodings, output and encoded tiles vs the reference;
    # chunks chosen per key/value group have no Flex column (its mask is built per query head)
    per_head = [name for name in chunked if bench.CASES[name].share == "head"]
    assert {(c["case"], c["encoding"]) for c in flex} == \
        {(case, enc) for case in [*per_head, "moba_k3_c128_nonlocal"] for enc in ("bits", "indices")}
    for c in flex:
        assert c["ok"] is True, c
        assert c["err_o"] <= c["tol"] and c["err_blocks"] <= c["tol"], c
        assert c["tiles_full"] > 0  # full tiles exist, so the blocks check covers them
    fla = [c for c in check if c["check"] == "fla"]
    assert len(fla) == 1 and fla[0]["ok"] is True, fla  # the interpreter runs fla's kernels here
    assert all(fla[0][f"err_{n}"] <= fla[0]["tol"] for n in ("o", "dq", "dk", "dv"))

    rows = result["rows"]
    for case in chunked:
        sdpa = [r for r in rows if r["case"] == case and r["column"] == "sdpa_cudnn"]
        assert len(sdpa) == 1 and sdpa[0]["fwd_ms"] > 0 and sdpa[0]["fwdbwd_ms"] > 0, sdpa
        flex_row = next(r for r in rows if r["case"] == case and r["column"] == "flex")
        if case in per_head:
            assert flex_row["fwd_ms"] > 0 and flex_row["fwd_x_sdpa"] > 0
            assert "backward" in flex_row["fwdbwd_skip"]  # FlexAttention has no CPU backward: said so
        else:
            assert "per query head" in flex_row["skip"]
        # every column either ran or says why, per pass
        for r in (r for r in rows if r["case"] == case):
            for p in ("fwd", "fwdbwd"):
                assert f"{p}_ms" in r or r.get("skip") or r.get(f"{p}_skip"), r
    generated = [r for r in rows if r["column"] == "generated"]  # under the interpreter here (conftest)
    assert {r["case"] for r in generated} == set(chunked)
    assert all(r["fwd_ms"] > 0 and r["fwdbwd_ms"] > 0 and r["key"].startswith(f"top{bench.CASES[r['case']].k}_chunk") for r in generated)
    nsa_fla = next(r for r in rows if r["case"] == "nsa_k16_c64" and r["column"] == "fla_nsa")
    assert "power of two >= 16" in nsa_fla["skip"]  # the smoke's 2 heads: not a GQA shape fla takes

    table = next(tmp_path.glob("bench_topk_smoke_*.md")).read_text()
    assert "| T | D |" in table and "Published, quoted, NOT measured" in table and "skipped [" in table


def _check_one(bench, monkeypatch, **patches):
    """The check's rows for moba_k8_c64 (and its local = false variant) with `patches` applied."""
    import torch

    for name, fn in patches.items():
        monkeypatch.setattr(bench, name, fn)
    return bench.run_check([bench.CASES["moba_k8_c64"]], torch.device("cpu"), bench.parse_args(["--smoke"]))


@pytest.mark.slow
def test_the_check_fails_when_the_selection_drops_a_chunk(monkeypatch):
    """One selected chunk fewer (an off-by-one in k): the Flex output and the encoded mask both
    differ from the reference, in every encoding."""
    bench = _script()
    real = bench.select_chunks

    def one_fewer(*args, **kwargs):
        idx = real(*args, **kwargs)
        idx[..., -1] = -1
        return idx

    rows = _check_one(bench, monkeypatch, select_chunks=one_fewer)
    assert rows and all(r["ok"] is False for r in rows), rows
    assert all(r["err_o"] > 1e-3 and r["err_blocks"] > 1e-3 for r in rows)


@pytest.mark.slow
def test_the_check_fails_when_the_full_tiles_are_lost(monkeypatch):
    """Tile lists without the full tiles: eager flex_attention (which ignores the tiles) still
    agrees, the encoded-mask check (what the compiled kernel reads) does not."""
    bench = _script()
    real = bench.block_tiles

    def no_full(*args, **kwargs):
        partial, full = real(*args, **kwargs)
        return partial, full & False

    rows = _check_one(bench, monkeypatch, block_tiles=no_full)
    assert rows and all(r["ok"] is False for r in rows), rows
    assert all(r["err_o"] <= r["tol"] < r["err_blocks"] for r in rows)


def test_attended_pairs_count_what_the_reference_attends():
    """The FLOP count's pairs against the reference's own masks, counted by brute force: the
    chunk cases (local on and off, the off case an upper bound) and the element cases (k keys,
    fewer at the start)."""
    import torch

    from seqdsl.reference.attention import visibility_mask
    from seqdsl.reference.top1 import _topk_mask

    bench = _script()
    T = 48
    for k_top in (1, 5, 64):
        case = bench.Case("e", "e", k_top, 1, True, False, "", element=True)
        visible = visibility_mask(T, window=None, device=torch.device("cpu"), sink=0)
        chosen = _topk_mask(torch.randn(T, T).masked_fill(~visible, float("-inf")), visible, k_top)
        assert bench.attended_pairs(case, T) == chosen.sum().item()
    chunk = bench.Case("c", "c", 2, 8, True, False, "")
    own = sum(min(i % 8 + 1, 8) for i in range(T))
    assert bench.attended_pairs(chunk, T) == sum(8 * min(2, i // 8) for i in range(T)) + own
    # sink tokens: a set union with the chosen chunks (the earliest, as counted) and the own chunk
    for local in (True, False):
        for sink in (3, 8, 21, 60):
            case = bench.Case("s", "s", 2, 8, local, False, "", sink=sink)
            count = 0
            for i in range(T):
                c = i // 8
                keys = set(range(min(2, c) * 8)) | {j for j in range(sink) if j <= i}
                if local or 2 > c:
                    keys |= set(range(c * 8, i + 1))
                count += len(keys)
            assert bench.attended_pairs(case, T) == count, (local, sink)


def test_block_tiles_cover_the_sink_tokens():
    """Every attended (query, key) pair lies in a tile of the BlockMask, and every full tile is
    attended whole, with queries that choose only their latest chunks: the sink tokens (over two
    chunks here) then lie in tiles no selection touches."""
    import torch

    bench = _script()
    T, C, block, sink, k = 512, 64, 128, 100, 2
    c_i = torch.arange(T) // C
    idx = torch.stack([c_i - 1 - s for s in range(k)], -1)  # the k latest earlier chunks
    idx = torch.where(idx >= 0, idx, -1)
    partial, full = bench.block_tiles(idx[None, None], T=T, chunk=C, local=True, block=block, sink=sink)
    keys = torch.arange(T)
    chosen = (idx[:, :, None] == (keys // C)[None, None, :]).any(1)
    attend = (chosen | (c_i[:, None] == (keys // C)[None, :]) | (keys < sink)[None, :]) & (keys[None, :] <= keys[:, None])
    tile = lambda m: m[0, 0].repeat_interleave(block, 0).repeat_interleave(block, 1)  # noqa: E731
    assert not (attend & ~tile(partial | full)).any()  # no attended pair outside the tiles
    assert attend[tile(full)].all()  # full tiles: every pair attended
    # without the sinks, the last query block's first key tile is untouched: the sinks alone need it
    assert not bench.block_tiles(idx[None, None], T=T, chunk=C, local=True, block=block)[0][0, 0, 3, 0]
