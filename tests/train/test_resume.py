"""A run killed with SIGKILL mid-training and resumed gives the uninterrupted run's loss curve
exactly (CPU, fixed seed): weights, optimizer, data cursor and schedule all come back."""

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
from tests.train.helpers import micro_run_args

ROOT = Path(__file__).resolve().parents[2]
STEPS = 30


def records(run: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    drop = ("time", "tokens_per_s")  # wall-clock fields differ between any two runs
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
    assert events == ["resume"]
