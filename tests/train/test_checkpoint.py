"""Checkpoints are atomic: a write killed at any point never leaves `latest` naming a missing or
incomplete checkpoint, and the previous checkpoint still loads."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

from seqdsl.run import checkpoint


def _fork_writer(root: Path) -> int:
    """Fork a child that writes checkpoints of a ~16 MB model (and its ~32 MB AdamW state) in a
    loop, step after step, until killed; return its pid. A fork shares the imported torch, so
    the child starts at once (a fresh interpreter spent seconds importing it). Everything that
    runs torch's thread pool (the first backward and optimizer step) happens before the fork,
    and the child keeps to one thread: a forked OpenMP pool is not usable."""
    model = torch.nn.Linear(2048, 2048)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2048)).sum().backward()
    opt.step()
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: never returns into pytest
        torch.set_num_threads(1)
        for step in range(1, 10_000):
            with torch.no_grad():
                model.weight.fill_(step)
            checkpoint.save(root, step, model, opt, {"cursor": step}, "spec", keep=2)
    finally:
        os._exit(1)


def _model_and_optimizer():
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 8)).sum().backward()
    opt.step()
    return model, opt


# Each case kills a writer at another moment (earlier and later inside a write); one runs in the
# fast suite, the others with the slow tests.
@pytest.mark.parametrize("delay", [pytest.param(0.05, marks=pytest.mark.slow), 0.13,
                                   pytest.param(0.29, marks=pytest.mark.slow)])
def test_sigkill_during_checkpoint_writes_leaves_latest_loadable(tmp_path, delay):
    root = tmp_path / "checkpoints"
    pid = _fork_writer(root)
    exited = lambda: os.waitpid(pid, os.WNOHANG)[0] != 0  # reaps it if it did
    gone = False
    try:
        deadline = time.monotonic() + 120
        while not (root / "latest").exists() and time.monotonic() < deadline and not (gone := exited()):
            time.sleep(0.005)
        time.sleep(delay)  # somewhere inside a later write
        gone = gone or exited()
        assert not gone, "the writer exited before it could be killed (its error is in the captured output)"
    finally:
        if not gone:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    loaded = checkpoint.load_latest(root)  # verified against the hashes in state.json
    model = torch.nn.Linear(2048, 2048)
    checkpoint.restore(loaded, model, None)
    assert torch.all(model.weight == loaded.state["step"]), "the weights are those of the step `latest` names"
    assert loaded.state["cursor"] == loaded.state["step"]


def test_write_failing_before_rename_keeps_previous_latest(tmp_path, monkeypatch):
    root = tmp_path / "checkpoints"
    model, opt = _model_and_optimizer()
    checkpoint.save(root, 1, model, opt, {}, "spec")

    def fail(*args, **kwargs):
        raise KeyboardInterrupt  # what a Ctrl-C inside the write raises

    monkeypatch.setattr(checkpoint.os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(root, 2, model, opt, {}, "spec")
    monkeypatch.undo()
    assert checkpoint.load_latest(root).path.name == "step_00000001"
    assert not (root / "step_00000002").exists()
    checkpoint.save(root, 2, model, opt, {}, "spec")  # the next write clears the stray temp dir
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_00000001", "step_00000002"]


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    root = tmp_path / "checkpoints"
    model, opt = _model_and_optimizer()
    for step in range(1, 5):
        checkpoint.save(root, step, model, opt, {}, "spec", keep=2)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_00000003", "step_00000004"]


def test_rng_state_round_trips(tmp_path):
    torch.manual_seed(3)
    state = checkpoint.rng_state()
    expected = torch.rand(4)
    torch.manual_seed(99)
    checkpoint.set_rng_state(state)
    assert torch.equal(torch.rand(4), expected)


def _flip_a_weight_byte(ckpt: Path) -> None:
    data = bytearray((ckpt / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (ckpt / "model.safetensors").write_bytes(bytes(data))


def test_a_damaged_latest_falls_back_to_the_newest_intact_checkpoint(tmp_path):
    root = tmp_path / "checkpoints"
    model, opt = _model_and_optimizer()
    for step in (1, 2, 3):
        checkpoint.save(root, step, model, opt, {"cursor": step}, "spec", keep=3)
    assert checkpoint.load_latest(root).passed_over is None
    _flip_a_weight_byte(root / "step_00000003")
    loaded = checkpoint.load_latest(root)
    assert (loaded.path.name, loaded.state["cursor"]) == ("step_00000002", 2)
    assert loaded.passed_over == f"checkpoint {root / 'step_00000003'} is damaged: model.safetensors does not match its hash"
    (root / "step_00000002" / "state.json").write_text("{")
    loaded = checkpoint.load_latest(root)  # the newest intact one, however far back
    assert loaded.path.name == "step_00000001" and "step_00000003 is damaged" in loaded.passed_over
    _flip_a_weight_byte(root / "step_00000001")
    with pytest.raises(checkpoint.CheckpointError, match="step_00000003 is damaged") as refused:
        checkpoint.load_latest(root)
    assert "no earlier checkpoint is intact" in refused.value.hint
