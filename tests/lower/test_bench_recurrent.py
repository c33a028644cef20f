"""benchmarks/bench_recurrent.py --smoke: the benchmark's code path on tiny shapes on the CPU (the
numbers mean nothing there; every row must be whole and the compiled form must agree with eager)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_recurrent.py"


@pytest.mark.slow
def test_benchmark_smoke_mode_times_eager_and_compiled_forms(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_recurrent", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "smoke.json"
    assert bench.main(["--smoke", "--specs", "gated_deltanet", "--recurrent", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["form"] for r in rows] == ["chunked", "chunked+compile", "recurrent"]
    assert all(r["ms"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    # float32 forms of one computation: rounding apart, the same output
    assert all(r["rel_diff_vs_eager"] < 1e-4 for r in rows[1:])
    assert "chunked+compile" in capsys.readouterr().out
