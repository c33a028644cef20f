"""experiments/study.py: every run of the study uses the same recipe but for the spec and the
seed; a run trains, is evaluated at longer contexts, is recorded, and is not run twice."""

from __future__ import annotations

import json

import pytest

from seqdsl.run.config import load_config
from tests.docs_generator import ROOT, load_script

study = load_script("experiments/study.py", "study")


def test_the_two_settings_differ_only_in_the_training_domains():
    limited = load_config(str(ROOT / study.RECIPES["limited"]), []).model_dump()
    mixed = load_config(str(ROOT / study.RECIPES["mixed"]), []).model_dump()
    assert limited["data"].pop("train_domains") == ["web_blogs"] and mixed["data"].pop("train_domains") == ["*"]
    assert limited == mixed
    assert limited["tokens"] == limited["batch"] * limited["seq_len"] * 450  # whole steps, one pass


def test_every_run_is_the_recipe_with_its_spec_and_seed_only():
    names = [run.name for run in study.STUDY]
    assert len(set(names)) == len(names)
    for run in study.STUDY:
        assert (ROOT / "specs" / f"{run.spec}.seq").exists(), run
        cmd = study.train_command(run, ROOT / "DATA", ROOT / "RUNS" / run.name, resume=False)
        assert cmd[:8] == ["seqdsl", "train", f"specs/{run.spec}.seq", "--config", study.RECIPES[run.setting],
                           "--seed", str(run.seed), "--out"]
        assert not any(a in cmd for a in ("--preset", "--tokens", "--batch", "--lr"))  # nothing per spec
    seeds = {spec: sorted(r.seed for r in study.STUDY if r.spec == spec and r.setting == "limited")
             for spec in ("transformer", "mamba2")}
    assert seeds == {"transformer": [0, 1, 2], "mamba2": [0, 1, 2]}


@pytest.fixture
def corpus(tmp_path):
    """Every domain of the study, a few documents each."""
    data = tmp_path / "data"
    for i, domain in enumerate(study.DOMAINS):
        (data / domain).mkdir(parents=True)
        docs = [{"text": f"{domain} document {j}: " + " ".join(f"w{(i * 7 + j * k) % 50}" for k in range(400))}
                for j in range(12)]
        (data / domain / "part.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return data


TINY = ["--preset", "tiny", "--seq-len", "64", "--batch", "4", "--tokens", "1024", "--set", "micro_batch=2",
        "--set", "eval_every=2", "--set", "checkpoint_every=2", "--set", "compile=false",
        "--set", "cuda_graphs=false", "--set", "data.eval_tokens=512", "--set", "data.heldout=0.3", "--device", "cpu"]


@pytest.mark.slow
def test_a_run_is_trained_evaluated_at_longer_contexts_recorded_and_not_repeated(corpus, tmp_path, capsys):
    runs, records = tmp_path / "runs", tmp_path / "records"
    args = ["run", "--data", str(corpus), "--runs", str(runs), "--records", str(records), "--tokenizer", "bytes",
            "--only", "limited-transformer-s0", "--extra", *TINY]
    assert study.main(args) == 0
    out = runs / "limited-transformer-s0"
    assert study.finished(out) and study.lengths_done(out)
    meta = json.loads((out / "study.json").read_text())
    [attempt] = meta["attempts"]
    assert attempt["rc"] == 0 and attempt["command"].startswith(
        "seqdsl train specs/transformer.seq --config recipes/study_limited_110m.toml --seed 0")
    assert sorted(meta["lengths"]) == ["128", "256"] and all(m["rc"] == 0 for m in meta["lengths"].values())
    for length in (128, 256):
        got = json.loads((out / f"eval_seq{length}.json").read_text())["records"]
        assert {r["seq_len"] for r in got} == {length} and {r["domain"] for r in got} == set(study.DOMAINS)

    assert study.main(["collect", "--runs", str(runs), "--dest", str(records)]) == 0
    kept = sorted(p.name for p in (records / "limited-transformer-s0").iterdir())
    assert kept == sorted([*study.RECORD_FILES, "eval_seq128.json", "eval_seq256.json"])  # no checkpoints

    capsys.readouterr()
    assert study.main(args) == 0  # finished and recorded: nothing to do
    assert "0 runs to do" in capsys.readouterr().out
    assert study.main([*args[:4], str(tmp_path / "fresh"), *args[5:]]) == 0  # a new machine: the records say done
    assert "0 runs to do" in capsys.readouterr().out and not (tmp_path / "fresh" / "limited-transformer-s0").exists()


def test_pending_settings_are_those_of_the_runs_without_records(tmp_path):
    """`prepare --setting pending` builds the caches the remaining runs read, and only those."""
    assert study.pending_settings(tmp_path) == ["limited", "mixed"]
    for run in study.STUDY:
        if run.setting == "limited":  # a finished run: its last evaluation is at its last step
            (tmp_path / run.name).mkdir()
            (tmp_path / run.name / "config.json").write_text(json.dumps({"steps": 3}))
            (tmp_path / run.name / "metrics.jsonl").write_text(json.dumps({"kind": "eval", "step": 3}) + "\n")
    assert study.pending_settings(tmp_path) == ["mixed"]
