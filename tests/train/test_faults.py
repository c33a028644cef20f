"""Bad input and failures mid-run give one readable message (exit 2, no traceback) and lose
nothing: a missing or corrupt data file, a damaged checkpoint with no intact one before it, a NaN
loss. (A damaged latest checkpoint with an intact one before it: tests/train/test_run_lines.py.)"""

from __future__ import annotations

import json

import pytest
import torch

from seqdsl.cli.main import main
from seqdsl.train import step as step_module
from tests.train.helpers import micro_run_args


def _one_message(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith("error: ")
    return err


def _at_call_5(monkeypatch, fault):
    """The loss's fifth call (step 5 of a micro run without accumulation) returns fault(loss);
    returns the real forward, to put back."""
    real = step_module.CausalLoss.forward
    calls = {"n": 0}

    def forward(self, inputs, targets):
        calls["n"] += 1
        loss = real(self, inputs, targets)
        return fault(loss) if calls["n"] == 5 else loss

    monkeypatch.setattr(step_module.CausalLoss, "forward", forward)
    return real


def test_missing_data_file_is_one_message(tmp_path, capsys):
    args = micro_run_args(tmp_path) + ["--set", f'data.files=["{tmp_path}/nowhere/*.jsonl"]',
                                       "--out", str(tmp_path / "run")]
    assert main(args) == 2
    assert "data file not found" in _one_message(capsys)


def test_corrupt_data_file_is_one_message(tmp_path, capsys):
    bad = tmp_path / "bad" / "web"
    bad.mkdir(parents=True)
    (bad / "web_00.jsonl.zst").write_bytes(b"this is not zstd" * 8)
    args = micro_run_args(tmp_path) + ["--set", f'data.files=["{bad}"]', "--out", str(tmp_path / "run")]
    assert main(args) == 2
    err = _one_message(capsys)
    assert "cannot read data file" in err and "web_00.jsonl.zst" in err


def test_a_domain_without_heldout_text_is_one_message_at_the_first_step(tmp_path, capsys):
    """The held-out sets are read beside the first step (seqdsl/train/run.py: _join_heldout): a
    domain with nothing held out still stops the run with one message right after that step,
    before any checkpoint, not after the whole run."""
    from seqdsl.data.documents import is_heldout
    from tests.train.helpers import write_jsonl

    text = next(t for t in (f"one short document, number {i}" for i in range(100)) if not is_heldout(t, 0.2))
    args = micro_run_args(tmp_path)  # writes the shards: web and code
    write_jsonl(tmp_path / "data" / "tiny" / "tiny_00.jsonl", [{"text": text}])
    run = tmp_path / "run"
    assert main(args + ["--out", str(run)]) == 2
    err = _one_message(capsys)
    assert "no held-out text for domain(s) tiny" in err, err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1]
    assert not (run / "checkpoints").exists() or not any((run / "checkpoints").iterdir())


def _trained(tmp_path) -> tuple[list[str], str]:
    args = micro_run_args(tmp_path, steps=4) + ["--out", str(tmp_path / "run")]
    assert main(args) == 0
    return args, (tmp_path / "run" / "checkpoints" / "latest").read_text()


@pytest.mark.parametrize("damage", ["flip_weights", "truncate_optimizer", "garble_state", "remove_weights"])
def test_damaged_checkpoint_is_refused_with_one_message(tmp_path, capsys, damage):
    args, latest = _trained(tmp_path)
    ckpt = tmp_path / "run" / "checkpoints" / latest
    for earlier in ckpt.parent.glob("step_*"):  # nothing intact to fall back to
        if earlier != ckpt:
            (earlier / "state.json").unlink()
    if damage == "flip_weights":
        data = bytearray((ckpt / "model.safetensors").read_bytes())
        data[-5] ^= 0xFF
        (ckpt / "model.safetensors").write_bytes(bytes(data))
    elif damage == "truncate_optimizer":
        data = (ckpt / "optimizer.pt").read_bytes()
        (ckpt / "optimizer.pt").write_bytes(data[: len(data) // 2])
    elif damage == "garble_state":
        (ckpt / "state.json").write_text("{not json")
    else:
        (ckpt / "model.safetensors").unlink()
    capsys.readouterr()
    assert main(args + ["--resume", "--tokens", str(8 * 4 * 16)]) == 2
    err = _one_message(capsys)
    assert f"checkpoint {ckpt} is damaged" in err and "no earlier checkpoint is intact either" in err


def test_resume_without_checkpoint_is_one_message(tmp_path, capsys):
    args = micro_run_args(tmp_path) + ["--out", str(tmp_path / "empty"), "--resume"]
    assert main(args) == 2
    assert "no checkpoint to resume from" in _one_message(capsys)


def test_resume_with_another_config_is_refused(tmp_path, capsys):
    args, _ = _trained(tmp_path)
    capsys.readouterr()
    assert main(args + ["--resume", "--lr", "0.5"]) == 2
    assert "the config differs" in _one_message(capsys)


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    real = _at_call_5(monkeypatch, lambda loss: loss * torch.nan)
    run = tmp_path / "run"
    args = micro_run_args(tmp_path, steps=8) + ["--out", str(run)]
    assert main(args) == 2
    err = _one_message(capsys)
    assert "the loss became nan at step 5; training stopped" in err
    assert "step_00000004" in err
    assert (run / "checkpoints" / "latest").read_text() == "step_00000004"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2, 3, 4]
    assert [r for r in rows if r["kind"] == "event" and r["event"] not in ("first_step", "paths", "heldout")] == [
        {"kind": "event", "step": 4, "event": "nan", "detail": "loss nan"}]
    # the kept checkpoint is good: the run resumes from it (the patched forward is gone)
    monkeypatch.setattr(step_module.CausalLoss, "forward", real)
    assert main(args + ["--resume"]) == 0


def test_out_of_memory_is_one_message_naming_the_shape_and_keeps_the_checkpoints(tmp_path, capsys, monkeypatch):
    """A step that runs out of device memory (MoBA at 8K fell to the O(T^2) reference on an
    H200 on 2026-11-27 and died with a traceback): one message with the micro batch's shape and
    what to change; the checkpoint before it stays the latest, and the run resumes from it."""
    def out_of_memory(loss):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB. GPU 0 has a total "
                                     "capacity of 139.80 GiB of which 9.91 GiB is free.")

    real = _at_call_5(monkeypatch, out_of_memory)
    run = tmp_path / "run"
    args = micro_run_args(tmp_path, steps=8) + ["--out", str(run)]
    assert main(args) == 2
    err = _one_message(capsys)
    assert "cpu out of memory at step 5 with micro batches of 4 x 16 tokens (tried to allocate 12.00 GiB)" in err
    assert "lower `micro_batch`" in err and "intact (continue with --resume)" in err
    assert (run / "checkpoints" / "latest").read_text() == "step_00000004"
    monkeypatch.setattr(step_module.CausalLoss, "forward", real)
    assert main(args + ["--resume"]) == 0


def _snapshot(run) -> dict:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_a_fresh_start_refuses_a_folder_that_holds_any_part_of_a_run(tmp_path, capsys):
    """Without --resume, a folder with checkpoints but no `latest`, or with a run's evaluations and
    no checkpoint at all (checkpoints deleted to save disk), is refused and left byte for byte. (A
    run stopped before its first checkpoint and evaluation starts again in place:
    tests/train/test_run_lines.py.)"""
    args, _ = _trained(tmp_path)
    run = tmp_path / "run"
    (run / "checkpoints" / "latest").unlink()
    before = _snapshot(run)
    capsys.readouterr()
    assert main(args) == 2
    assert "already holds a run with checkpoints" in _one_message(capsys)
    assert _snapshot(run) == before
    for path in (run / "checkpoints").iterdir():
        for f in path.iterdir():
            f.unlink()
        path.rmdir()
    (run / "checkpoints").rmdir()
    before = _snapshot(run)
    assert main(args) == 2
    err = _one_message(capsys)
    assert "already holds a run's evaluations (metrics.jsonl) and no checkpoint to resume from" in err
    assert _snapshot(run) == before


def test_resume_without_latest_takes_the_newest_intact_checkpoint(tmp_path, capsys):
    args, latest = _trained(tmp_path)
    ckpt = tmp_path / "run" / "checkpoints"
    (ckpt / "latest").unlink()
    capsys.readouterr()
    assert main(args + ["--resume"]) == 0
    err = capsys.readouterr().err
    assert "latest is missing" in err and latest in err  # resumed from the newest step, and says so
    assert (ckpt / latest / "state.json").is_file()


def test_resume_names_the_settings_that_differ_and_repairs_a_damaged_config_json(tmp_path, capsys):
    args, _ = _trained(tmp_path)
    run = tmp_path / "run"
    capsys.readouterr()
    assert main(args + ["--resume", "--lr", "0.5"]) == 2
    assert "the config differs from the one" in (err := _one_message(capsys)) and "(lr)" in err
    good = (run / "config.json").read_text()
    (run / "config.json").write_text("{bad")
    assert main(args + ["--resume"]) == 0
    assert json.loads((run / "config.json").read_text()) == json.loads(good)


@pytest.mark.parametrize("where", ["a_file", "under_a_file"])
def test_an_out_that_cannot_be_a_run_directory_is_one_message(tmp_path, capsys, where):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("keep me")
    out = blocker if where == "a_file" else blocker / "run"
    assert main(micro_run_args(tmp_path, steps=2) + ["--out", str(out)]) == 2
    err = _one_message(capsys)
    assert str(out) in err and ("is a file" in err or "cannot create the run directory" in err)
    assert blocker.read_text() == "keep me"
