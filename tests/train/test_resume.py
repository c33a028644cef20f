"""A run stopped mid-training and resumed gives the uninterrupted run's loss curve exactly (CPU,
fixed seed): weights, optimizer, data cursor and schedule all come back. Stopped by Ctrl-C in the
fast suite (in-process, a second); by SIGKILL in a fresh interpreter with the slow tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seqdsl.cli.main import main
from seqdsl.train import step as step_module
from tests.train.helpers import micro_run_args

ROOT = Path(__file__).resolve().parents[2]
STEPS = 30


def records(run: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    drop = ("time", "tokens_per_s", "data_wait_s")  # wall-clock fields differ between any two runs
    return [{k: v for k, v in r.items() if k not in drop} for r in rows if r["kind"] == kind]


def _kill_after_a_checkpoint(args: list[str], run: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "seqdsl.cli.main", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if (run / "checkpoints" / "latest").exists() and (run / "metrics.jsonl").exists():
                steps = [json.loads(line).get("step", 0) for line in (run / "metrics.jsonl").read_text().splitlines()
                         if line.endswith("}")]
                if max(steps, default=0) >= 3:
                    break
            time.sleep(0.005)
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read().decode()}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow  # three runs, one of them a fresh interpreter importing torch: 5 s
def test_sigkilled_run_resumes_to_the_uninterrupted_loss_curve(tmp_path):
    args = micro_run_args(tmp_path, steps=STEPS)
    assert main(args + ["--out", str(tmp_path / "full")]) == 0
    killed = tmp_path / "killed"
    _kill_after_a_checkpoint(args + ["--out", str(killed)], killed)
    done = [r["step"] for r in records(killed, "train")]
    assert done and max(done) < STEPS, "killed mid-training"
    assert main(args + ["--out", str(killed), "--resume"]) == 0
    assert records(killed, "train") == records(tmp_path / "full", "train")
    assert records(killed, "eval") == records(tmp_path / "full", "eval")
    events = [r["event"] for r in records(killed, "event")]
    # each start times its first step and reads its held-out sets
    assert events == ["first_step", "paths", "heldout", "resume", "first_step", "paths", "heldout"]


def test_interrupted_run_resumes_to_the_uninterrupted_loss_curve(tmp_path, monkeypatch):
    steps = 8  # checkpoints every 2 steps, evaluations every 4 (tests/train/helpers.py)
    args = micro_run_args(tmp_path, steps=steps)
    assert main(args + ["--out", str(tmp_path / "full")]) == 0
    real = step_module.CausalLoss.forward
    calls = {"n": 0}

    def ctrl_c_at_step_7(self, inputs, targets):
        calls["n"] += 1
        if calls["n"] == 7:
            raise KeyboardInterrupt
        return real(self, inputs, targets)

    monkeypatch.setattr(step_module.CausalLoss, "forward", ctrl_c_at_step_7)
    stopped = tmp_path / "stopped"
    assert main(args + ["--out", str(stopped)]) == 130
    assert [r["step"] for r in records(stopped, "train")] == [1, 2, 3, 4, 5, 6]
    monkeypatch.setattr(step_module.CausalLoss, "forward", real)
    assert main(args + ["--out", str(stopped), "--resume"]) == 0
    assert records(stopped, "train") == records(tmp_path / "full", "train")
    assert records(stopped, "eval") == records(tmp_path / "full", "eval")
    assert [r["event"] for r in records(stopped, "event")] == [
        "first_step", "paths", "heldout", "resume", "first_step", "paths", "heldout"]
