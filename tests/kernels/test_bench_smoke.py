"""benchmarks/bench_top1.py --smoke: the benchmark's code path on tiny shapes, on the CPU under the
Triton interpreter (the numbers mean nothing there; the rows, JSON and table must be whole)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_top1.py"


def _script(path: Path):
    """A benchmarks/ script loaded as a module (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_benchmark_smoke_mode_writes_rows_json_and_table(tmp_path):
    bench = _script(BENCH)
    assert bench.main(["--smoke", "--out", str(tmp_path)]) == 0
    result = json.loads(next(tmp_path.glob("bench_top1_smoke_*.json")).read_text())
    kernels = {row["kernel"] for row in result["rows"]}
    assert kernels == {"top1_element", "top1_chunk_exact", "top1_chunk_approx"}
    assert all(row["fwd_ms"] > 0 and row["fwdbwd_ms"] > 0 for row in result["rows"])
    assert result["partial"] is False
    assert "| top1_chunk_approx |" in next(tmp_path.glob("bench_top1_smoke_*.md")).read_text()


@pytest.mark.slow
def test_a_benchmark_cut_off_leaves_the_rows_it_measured(tmp_path, monkeypatch):
    """A time limit that kills the run mid-way (here: the third row's timing raises) leaves the
    rows measured before it in the JSON and the table, marked partial."""
    bench = _script(BENCH)
    timed, real = [], bench.bench

    def limited(fn, device):
        timed.append(fn)
        if len(timed) > 4:  # two timings per row: rows 1 and 2 complete
            raise KeyboardInterrupt
        return real(fn, device)

    monkeypatch.setattr(bench, "bench", limited)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--smoke", "--out", str(tmp_path)])
    result = json.loads(next(tmp_path.glob("bench_top1_smoke_*.json")).read_text())
    assert result["partial"] is True
    assert [row["kernel"] for row in result["rows"]] == ["top1_element", "top1_chunk_exact"]
    table = next(tmp_path.glob("bench_top1_smoke_*.md")).read_text()
    assert "cut off" in table and "| top1_chunk_exact |" in table and "| top1_chunk_approx |" not in table


PROFILE = BENCH.parent / "profile_top1.py"


@pytest.mark.slow
def test_profile_smoke_mode_writes_a_case_per_kernel(tmp_path):
    """benchmarks/profile_top1.py --smoke: every kernel's case profiled (CPU: the torch-op table
    only, the interpreter's kernels are not CUDA kernels), JSON and tables written."""
    profile = _script(PROFILE)
    assert profile.main(["--smoke", "--out", str(tmp_path)]) == 0
    result = json.loads(next(tmp_path.glob("profile_top1_smoke_*.json")).read_text())
    cases = {case["kernel"]: case for case in result["cases"]}
    assert set(cases) == {"top1_element", "top1_chunk_exact", "top1_chunk_approx"}
    assert all(case["step_ms"] > 0 and any(op["op"] == "aten::empty" for op in case["ops"]) for case in cases.values())
    assert "| torch op |" in next(tmp_path.glob("profile_top1_smoke_*.md")).read_text()


def test_profile_groups_kernels_by_name():
    profile = _script(PROFILE)
    assert profile.group_of("top1_chunk_e3b4696ebbd5_attn_bwd") == "ours"
    assert profile.group_of("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") == "sdpa"
    assert profile.group_of("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>") \
        == "torch: fill/zeros"
    assert profile.group_of("void at::native::unrolled_elementwise_kernel<copy_kernel>") == "torch: copy/cast"
    assert profile._union_us([(0, 2), (1, 3), (5, 6)]) == 4


SWEEP = BENCH.parent / "sweep_top1_tiles.py"


@pytest.mark.slow
def test_tile_sweep_smoke_mode_times_and_checks_every_site(tmp_path):
    """benchmarks/sweep_top1_tiles.py --smoke: a default row per kernel and a checked row per
    launch site it has, under the interpreter (the times mean nothing there)."""
    sweep = _script(SWEEP)
    assert sweep.main(["--smoke", "--out", str(tmp_path)]) == 0
    result = json.loads(next(tmp_path.glob("sweep_top1_tiles_smoke_*.json")).read_text())
    sites = {(r["kernel"], r["site"]) for r in result["rows"]}
    for kernel, kernel_sites in sweep.SITES_OF.items():
        assert {(kernel, s) for s in ["default", *kernel_sites]} <= sites
    assert all(r["ok"] and r["ms"] > 0 for r in result["rows"] if r["site"] != "default")


def test_tile_sweep_where_keeps_only_candidates_with_the_given_fields():
    """--where narrows a site's candidates (e.g. to the fused-dq element backward)."""
    sweep = _script(SWEEP)
    site = sweep.CANDIDATES["element.bwd_dkdv"]
    fused = [c for c in site if sweep.matches(c, "FUSE_DQ=1")]
    assert fused and all(sweep.fields(c)["FUSE_DQ"] == 1 for c in fused)
    assert len(fused) < len(site)  # the unfused tuples have no FUSE_DQ field
    assert [c for c in site if sweep.matches(c, "")] == site
    assert [sweep.fields(c) for c in site if sweep.matches(c, "FUSE_DQ=1, num_warps=8")] == \
        [sweep.fields(c) for c in fused if sweep.fields(c)["num_warps"] == 8]
