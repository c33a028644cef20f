"""benchmarks/bench_train.py and benchmarks/profile_train.py run end to end in their CPU smoke modes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_train_smoke_mode_measures_every_family(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_train", ROOT / "benchmarks" / "bench_train.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "smoke.json"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["spec"] for r in result["rows"]] == bench.FAMILIES.split(",")
    for row in result["rows"]:
        assert row["tokens_per_s"] > 0 and row["loss"] == row["loss"]
    assert "tokens/s" in capsys.readouterr().out


@pytest.mark.slow
def test_profile_train_smoke_mode_times_the_library_step(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("profile_train", ROOT / "benchmarks" / "profile_train.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "smoke.json"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["variant"] for r in result["rows"]] == ["eager"]
    assert result["rows"][0]["tokens_per_s"] > 0 and result["rows"][0]["loss"] == result["rows"][0]["loss"]
    assert "profile of `eager`" in capsys.readouterr().out
