"""benchmarks/bench_mamba.py --smoke: the benchmark's whole code path (one layer's mixing, then
Transformer++ against Mamba-2 training at two lengths with seqdsl.train's step) on tiny sizes on
the CPU, reference only. The figures mean nothing there; the rows, JSON and tables must be whole,
so that the GPU run cannot fail on an import or a renamed interface."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_mamba.py"


def test_bench_mamba_smoke_mode_measures_the_layer_and_both_models(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_mamba", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "smoke.json"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["smoke"]
    assert [part["spec"] for part in result["layers"]] == ["mamba2", "mamba"]  # Mamba-2's SSD, Mamba-1's scan
    for part in result["layers"]:
        (layer,) = part["rows"]  # the reference only: mamba-ssm and fla run on CUDA only
        assert layer["op"] == "reference.chunked" and layer["ms"] > 0 and layer["rel_err_out"] == 0.0
    rows = {(r["spec"], r["seq"]): r for r in result["train"]}
    assert set(rows) == {(name, seq) for name in ("transformer", "mamba2") for seq in (16, 32)}
    for r in rows.values():
        assert r["tokens_per_s"] > 0 and r["batch"] * r["seq"] == 32
    assert any("reference.chunked" in p for p in rows["mamba2", 32]["paths"])
    assert any("sdpa.causal" in p for p in rows["transformer", 32]["paths"])
    printed = capsys.readouterr().out
    assert "Transformer++ tok/s" in printed and "Mamba-2 ratio" in printed
