"""`seqdsl check` runs anywhere: the check path imports neither torch nor triton. How long it
takes is measured by benchmarks/bench_check.py."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fresh_imports import heavy_imports

SPECS = Path(__file__).resolve().parents[2] / "specs"
HEAVY = ("torch", "triton", "numpy")


def test_check_cli_imports_no_backend():
    """In a fresh interpreter: run the CLI's check and explain, then look at sys.modules."""
    assert heavy_imports("check cli", HEAVY) == ([], "1")


def test_check_library_imports_no_backend():
    assert heavy_imports("check library", HEAVY) == ([], "None")


def test_the_check_benchmark_runs_over_every_spec(tmp_path):
    """The time itself is a benchmark's (benchmarks/bench_check.py), not a test's: here its run
    checks every library spec and writes a time. Its heavy-import column is not asserted: in
    this process other tests may have loaded torch (the fresh-interpreter tests above check that)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_check", SPECS.parent / "benchmarks" / "bench_check.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "check.json"
    assert bench.main(["--repeat", "1", "--out", str(out)]) == 0
    row = json.loads(out.read_text())
    assert row["specs"] == len(list(SPECS.glob("*.seq"))) and row["warm_median_s"] > 0
