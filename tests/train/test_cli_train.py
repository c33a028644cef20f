"""`seqdsl train` with the README's recipe on the builtin corpus (shortened): a run directory
with the contract's files, in-domain and OOD evaluation records, and a reloadable spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import seqdsl
from seqdsl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_readme_recipe_writes_the_run_directory(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", str(ROOT / "specs" / "transformer.seq"), "--config", str(ROOT / "recipes" / "tiny_builtin.toml"),
            "--out", str(out), "--tokens", str(2 * 4 * 64), "--batch", "4", "--seq-len", "64",
            "--set", "data.eval_tokens=512", "--set", "log_every=1"]
    assert main(args) == 0
    assert "step 2  loss" in capsys.readouterr().err  # the plain progress line (stderr is not a terminal)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "config.json", "metrics.jsonl", "spec.seq"]
    config = json.loads((out / "config.json").read_text())
    assert config["train_domains"] == ["docstrings"] and config["ood_domains"] == ["code", "manual"]
    assert config["data_source"].startswith("builtin:") and config["steps"] == 2 and config["seq_len"] == 64
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = {r["domain"]: r for r in rows if r["kind"] == "eval"}
    assert set(evals) == {"docstrings", "code", "manual"} and evals["docstrings"]["in_domain"]
    assert all(r["eval_tokens"] >= 511 and r["bpb"] > 0 for r in evals.values())
    assert (out / "checkpoints" / "latest").read_text() == "step_00000002"
    program = seqdsl.loads((out / "spec.seq").read_text()).program
    assert program.models[0].context == 64 and program.models[0].vocab == 256
