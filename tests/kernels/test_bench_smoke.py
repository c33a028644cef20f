"""benchmarks/bench_top1.py --smoke: the benchmark's code path on tiny shapes, on the CPU under the
Triton interpreter (the numbers mean nothing there; the rows, JSON and table must be whole)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_top1.py"


@pytest.mark.slow
def test_benchmark_smoke_mode_writes_rows_json_and_table(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_top1", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--smoke", "--out", str(tmp_path)]) == 0
    result = json.loads(next(tmp_path.glob("bench_top1_smoke_*.json")).read_text())
    kernels = {row["kernel"] for row in result["rows"]}
    assert kernels == {"top1_element", "top1_chunk_exact", "top1_chunk_approx"}
    assert all(row["fwd_ms"] > 0 and row["fwdbwd_ms"] > 0 for row in result["rows"])
    assert "| top1_chunk_approx |" in next(tmp_path.glob("bench_top1_smoke_*.md")).read_text()
