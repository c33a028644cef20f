"""Checkpoints are atomic: a write killed at any point never leaves `latest` naming a missing or
incomplete checkpoint, and the previous checkpoint still loads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from seqdsl.train import checkpoint

ROOT = Path(__file__).resolve().parents[2]

# A child that writes checkpoints of a ~16 MB model in a loop, step after step, until killed.
WRITER = """
import sys, torch
from pathlib import Path
from seqdsl.train import checkpoint
model = torch.nn.Linear(2048, 2048)
opt = torch.optim.AdamW(model.parameters())
model(torch.ones(1, 2048)).sum().backward(); opt.step()
for step in range(1, 10_000):
    with torch.no_grad():
        model.weight.fill_(step)
    checkpoint.save(Path(sys.argv[1]), step, model, opt, {"cursor": step}, "spec", keep=2)
"""


def _model_and_optimizer():
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 8)).sum().backward()
    opt.step()
    return model, opt


# Each case spawns a child that imports torch (seconds): one delay runs in the fast suite, the
# others (earlier and later inside a write) with the slow tests.
@pytest.mark.parametrize("delay", [pytest.param(0.05, marks=pytest.mark.slow), 0.13,
                                   pytest.param(0.29, marks=pytest.mark.slow)])
def test_sigkill_during_checkpoint_writes_leaves_latest_loadable(tmp_path, delay):
    root = tmp_path / "checkpoints"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], cwd=ROOT, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (root / "latest").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(delay)  # somewhere inside a later write
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
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
