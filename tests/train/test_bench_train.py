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


@pytest.mark.parametrize("keep_absolute", [False, True])
def test_bench_train_builds_the_model_seqdsl_train_builds_at_a_longer_context(keep_absolute):
    """The benchmark's model (and so its FLOPs per token and MFU) is the one `seqdsl train`
    resolves at the same seq_len: MoBA's 128-token chunks are 512 at 8K, or stay 128 with
    keep_absolute (the benchmark once kept the preset's 2K chunks at every context)."""
    from seqdsl.run.config import RunConfig
    from seqdsl.train.setup import resolve_model

    spec = importlib.util.spec_from_file_location("bench_train", ROOT / "benchmarks" / "bench_train.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    program, model = bench.spec_at("moba", "110m", 8192, keep_absolute)
    config = RunConfig(spec=str(ROOT / "specs" / "moba.seq"), preset="110m", seq_len=8192,
                       keep_absolute=keep_absolute)
    trained = resolve_model(config, vocab=model.vocab)
    assert model.context == trained.spec.context == 8192
    over = program.mixer(model.mixer[0]).select.over
    assert over == trained.program.mixer(trained.spec.mixer[0]).select.over
    assert over.size == (128 if keep_absolute else 512)
