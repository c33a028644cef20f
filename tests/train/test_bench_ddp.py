"""benchmarks/bench_ddp.py: its curve comparison, and its CPU smoke mode end to end."""

from __future__ import annotations

import importlib.util
import json
import math
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_ddp", ROOT / "benchmarks" / "bench_ddp.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_noise_estimate_ignores_a_smooth_trend_and_finds_added_noise():
    bench = _bench()
    trend = [5.0 - 0.1 * t + 0.001 * t * t for t in range(200)]
    assert bench.noise_of(trend) < 1e-12
    rng = random.Random(0)
    noisy = [x + rng.gauss(0.0, 0.02) for x in trend]
    assert bench.noise_of(noisy) == pytest.approx(0.02, rel=0.15)


def test_compare_reports_the_largest_gap_against_the_reference_noise():
    bench = _bench()
    rng = random.Random(1)
    reference = [3.0 - 0.01 * t + rng.gauss(0.0, 0.01) for t in range(100)]
    other = list(reference)
    other[40] += 0.005
    result = bench.compare(reference, other)
    assert result["max_abs_diff"] == pytest.approx(0.005)
    assert result["max_diff_over_noise"] == pytest.approx(0.005 / bench.noise_of(reference[50:]))
    with pytest.raises(ValueError):
        bench.compare(reference, other[:-1])


@pytest.mark.slow
def test_bench_ddp_smoke_mode_compares_one_process_with_ddp_fsdp_and_a_resumed_fsdp_run(tmp_path, capsys):
    out = tmp_path / "smoke.json"
    assert _bench().main(["--smoke", "--workdir", str(tmp_path / "runs"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {r["mode"]: r for r in result["rows"]}
    assert sorted(rows) == ["ddp", "fsdp", "fsdp>single", "single"]
    assert [rows[m]["processes"] for m in ("single", "ddp", "fsdp", "fsdp>single")] == [1, 2, 2, "2 then 1"]
    half = result["steps"] // 2
    assert rows["fsdp>single"]["losses"][:half] == rows["fsdp"]["losses"][:half], "the FSDP2 run's own records"
    for mode in ("ddp", "fsdp", "fsdp>single"):  # float32 on CPU: only the order of sums differs
        assert rows[mode]["max_abs_diff"] <= 1e-5 * rows["single"]["losses"][0]
        assert rows[mode]["tokens_per_s"] > 0 and math.isfinite(rows[mode]["max_diff_over_noise"])
    assert out.with_suffix(".md").read_text().count("| fsdp |") == 1
    assert "tokens/s" in capsys.readouterr().out
