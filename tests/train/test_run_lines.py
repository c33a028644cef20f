"""What `seqdsl train` says when a run stops or resumes, and in what order it checks things: a
Ctrl-C names the last checkpoint and the command that continues from it, a resumed run says from
where, a damaged latest checkpoint is passed over for the previous intact one with one line, and
a spec or checkpoint that refuses the run does so before any data is read."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import seqdsl.train.run
from seqdsl.cli.main import main
from seqdsl.run import checkpoint
from seqdsl.train import step as step_module
from tests.train.helpers import micro_run_args

ROOT = Path(__file__).resolve().parents[2]
STEPS = 8  # micro runs: a checkpoint every 2 steps, the newest 2 kept (tests/train/helpers.py)


def train_records(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("time", "tokens_per_s", "data_wait_s")} for r in rows if r["kind"] == "train"]


def ctrl_c_at_forward(monkeypatch, n: int) -> None:
    """Raise KeyboardInterrupt (what Ctrl-C raises) in the n-th training forward, step n."""
    real, calls = step_module.CausalLoss.forward, {"n": 0}

    def forward(self, inputs, targets):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(self, inputs, targets)

    monkeypatch.setattr(step_module.CausalLoss, "forward", forward)


def test_ctrl_c_says_the_last_checkpoint_and_the_command_that_continues_the_run(tmp_path, capsys, monkeypatch):
    args = micro_run_args(tmp_path, steps=STEPS)
    stopped = tmp_path / "stopped"
    ctrl_c_at_forward(monkeypatch, 7)
    assert main(args + ["--out", str(stopped)]) == 130
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    said, _, command = lines[0].partition("; continue with: ")
    assert said == f"interrupted; the last checkpoint of {stopped} is step 6 ({stopped / 'checkpoints' / 'step_00000006'})"
    words = shlex.split(command)
    assert words == ["seqdsl", *args, "--out", str(stopped), "--resume"]
    monkeypatch.undo()
    assert main(words[1:]) == 0  # the printed command continues the run (exactly: tests/train/test_resume.py)
    assert [r["step"] for r in train_records(stopped)] == list(range(1, STEPS + 1))


def test_ctrl_c_before_the_first_checkpoint_says_there_is_nothing_to_resume(tmp_path, capsys, monkeypatch):
    args = micro_run_args(tmp_path, steps=STEPS)
    run = tmp_path / "run"
    ctrl_c_at_forward(monkeypatch, 1)
    assert main(args + ["--out", str(run)]) == 130
    said, _, command = capsys.readouterr().err.strip().partition("; nothing to resume, start again with: ")
    assert said == f"interrupted before the first checkpoint of {run}"
    assert shlex.split(command) == ["seqdsl", *args, "--out", str(run)]  # no --resume: there is no checkpoint
    monkeypatch.undo()
    assert main(shlex.split(command)[1:]) == 0


def test_a_resumed_run_says_from_where_first(tmp_path, capsys):
    args = [a for a in micro_run_args(tmp_path, steps=STEPS) if a != "--quiet"]
    run = tmp_path / "run"
    assert main(args + ["--out", str(run), "--tokens", str(4 * 4 * 16)]) == 0  # 4 steps: checkpoints 2 and 4
    capsys.readouterr()
    # a longer run changes the config digest; resume the same one instead, after dropping its end
    (run / "checkpoints" / "latest").write_text("step_00000002")
    assert main(args + ["--out", str(run), "--tokens", str(4 * 4 * 16), "--resume"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"resuming {run} at step 2 of 4 from {run / 'checkpoints' / 'step_00000002'}"
    assert sum(line.startswith("resuming") for line in lines) == 1


def _flip_a_weight_byte(ckpt: Path) -> None:
    data = bytearray((ckpt / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (ckpt / "model.safetensors").write_bytes(bytes(data))


def test_a_damaged_latest_checkpoint_is_passed_over_with_one_line(tmp_path, capsys):
    args = micro_run_args(tmp_path, steps=STEPS) + ["--out", str(tmp_path / "run")]
    assert main(args) == 0
    run = tmp_path / "run"
    before = train_records(run)
    latest, previous = run / "checkpoints" / "step_00000008", run / "checkpoints" / "step_00000006"
    _flip_a_weight_byte(latest)
    capsys.readouterr()
    # `seqdsl eval` scores what it is pointed at: it refuses and names the intact checkpoint
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"checkpoint {latest} is damaged: model.safetensors does not match its hash" in err
    assert f"hint: the previous checkpoint is intact: seqdsl eval {previous}" in err
    # --resume falls back (even with --quiet), redoes steps 7-8 and rewrites the damaged checkpoint
    assert main(args + ["--resume"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"warning: checkpoint {latest} is damaged: model.safetensors does not match its hash; "
        f"resuming {run} at step 6 of 8 from the previous intact checkpoint, {previous}"]
    assert train_records(run) == before
    assert checkpoint.load_latest(run / "checkpoints").path == latest and checkpoint.verify(latest)


class DataWasRead(Exception):
    pass


def _no_data(*args, **kwargs):
    raise DataWasRead


BAD_SPEC = "mixer a { select = top(1) weights = linear }\nmodel m { layers = 1 d_model = 16 vocab = 256 context = 16 mixer = a }\n"


def test_the_spec_and_the_checkpoint_refuse_a_run_before_any_data_is_read(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(seqdsl.train.run, "resolve_data", _no_data)
    args = micro_run_args(tmp_path, steps=STEPS)
    with pytest.raises(DataWasRead):  # the patch does intercept the run's data
        main(args + ["--out", str(tmp_path / "fresh")])
    (tmp_path / "bad.seq").write_text(BAD_SPEC)
    assert main([str(tmp_path / "bad.seq") if a.endswith("micro.seq") else a for a in args]
                + ["--out", str(tmp_path / "bad")]) == 2
    assert "mixer `a` cannot be lowered" in capsys.readouterr().err
    assert main(args + ["--out", str(tmp_path / "empty"), "--resume"]) == 2
    assert "no checkpoint to resume from" in capsys.readouterr().err
    damaged = tmp_path / "damaged" / "checkpoints" / "step_00000002"
    damaged.mkdir(parents=True)
    (damaged.parent / "latest").write_text(damaged.name)
    assert main(args + ["--out", str(tmp_path / "damaged"), "--resume"]) == 2
    assert f"checkpoint {damaged} is damaged" in capsys.readouterr().err


def test_the_data_is_read_beside_the_path_planning_and_the_first_step_says_where_the_time_went(tmp_path, monkeypatch):
    """One process reads the stream on a thread while the paths are planned, and the held-out
    sets on another after it, never waited for before the first step and joined right after it
    (seqdsl/train/run.py: _set_up, _join_heldout); the first_step event splits the time to the
    first step."""
    import threading

    from seqdsl.run.data import RunData

    readers, real_sets = [], RunData.heldout_sets
    monkeypatch.setattr(RunData, "heldout_sets", lambda self, tok: readers.append(threading.current_thread().name)
                        or real_sets(self, tok))
    run = tmp_path / "run"
    assert main(micro_run_args(tmp_path, steps=2) + ["--out", str(run)]) == 0
    assert readers == ["seqdsl-heldout"]
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    names = [r["event"] for r in events if r["kind"] == "event"]
    assert names[:3] == ["first_step", "paths", "heldout"], names
    assert [r["step"] for r in events if r["kind"] == "event" and r["event"] == "heldout"] == [1]
    joined = next(i for i, r in enumerate(events) if r.get("event") == "heldout")
    assert [r["step"] for r in events[:joined] if r["kind"] == "train"] == [1]  # after step 1, before step 2
    first = next(r for r in events if r["kind"] == "event" and r["event"] == "first_step")
    startup = first["startup"]
    assert set(startup) == {"model", "plan", "data", "data_wait", "first_step"}
    # the wait ends when the joined thread wakes the caller, after the work's own clock stopped:
    # a loaded machine (CI beside other jobs) adds milliseconds of scheduling to it (2.2 ms seen)
    assert all(v >= 0 for v in startup.values()) and startup["data_wait"] <= startup["data"] + 0.05
    # the phases on the main thread happen one after the other, within the command's time
    assert startup["model"] + startup["plan"] + startup["data_wait"] + startup["first_step"] <= first["seconds"]
    assert f"model {startup['model']:.1f} s" in first["detail"]


def test_the_libraries_are_imported_before_the_data_thread_starts(tmp_path, monkeypatch):
    """Planning's imports (the backends' libraries, through the static path plan) and the shard
    readers' happen on the main thread before the data thread starts: a library imported on both
    at once (transformers, lazily loaded, under mamba-ssm and `datasets`) was seen half-made."""
    import threading

    from seqdsl.lower.lm import LanguageModel
    from seqdsl.run.data import RunData

    order = []
    describe, stream = LanguageModel.describe_paths, RunData.training_stream
    monkeypatch.setattr(LanguageModel, "describe_paths",
                        lambda self, device: order.append(("describe", threading.current_thread().name))
                        or describe(self, device))
    monkeypatch.setattr(seqdsl.train.run, "import_readers",
                        lambda: order.append(("readers", threading.current_thread().name)))
    monkeypatch.setattr(RunData, "training_stream", lambda self, *a, **k: order.append(
        ("stream", threading.current_thread().name)) or stream(self, *a, **k))
    assert main(micro_run_args(tmp_path, steps=2) + ["--out", str(tmp_path / "run")]) == 0
    main_thread = threading.main_thread().name
    assert order[:3] == [("describe", main_thread), ("readers", main_thread), ("stream", "seqdsl-data")]


@pytest.mark.slow  # the README's recipe in a fresh interpreter, twice: 20-40 s on 2 cores
def test_sigint_to_seqdsl_train_says_one_line_and_keeps_the_run_resumable(tmp_path):
    steps = 40
    run = tmp_path / "run"
    # 40 steps: once the first checkpoint exists, enough steps are left that a loaded machine
    # cannot finish the run before the interrupt lands
    args = ["train", "specs/transformer.seq", "--config", "recipes/tiny_builtin.toml", "--out", str(run),
            "--tokens", str(steps * 4 * 64), "--batch", "4", "--seq-len", "64",
            "--set", "checkpoint_every=2", "--set", "eval_every=0", "--set", "data.eval_tokens=512"]
    # SIGINT at its default in the child whatever this process inherited: a test runner started
    # in the background of a non-interactive shell ignores SIGINT, and Python then installs no
    # KeyboardInterrupt handler in its children (the run would go on to the end)
    proc = subprocess.Popen([sys.executable, "-m", "seqdsl.cli.main", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints" / "latest").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, f"the run ended before it could be interrupted: {proc.stderr.read()}"
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130 and "Traceback" not in err, err
    last = err.splitlines()[-1]
    said, _, command = last.partition("; continue with: ")
    step = checkpoint.load_latest(run / "checkpoints").state["step"]  # intact, verified against its hashes
    assert said == f"interrupted; the last checkpoint of {run} is step {step} ({run / 'checkpoints'}/step_{step:08d})"
    assert shlex.split(command) == ["seqdsl", *args, "--resume"]
    assert json.loads((run / "config.json").read_text())["steps"] == steps
    assert [r["step"] for r in train_records(run)][:step] == list(range(1, step + 1))  # its records are kept
    resumed = subprocess.run([sys.executable, "-m", "seqdsl.cli.main", *shlex.split(command)[1:]], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {run} at step {step} of {steps}" in resumed.stderr.splitlines()[0]
    assert [r["step"] for r in train_records(run)] == list(range(1, steps + 1))


def test_the_run_logs_the_path_every_layer_took(tmp_path):
    """The paths event lists what `seqdsl lower` lists for the same model and device (one
    grouping, lower.lm.path_lines), after the first step planned them."""
    from seqdsl.lower.lm import path_lines

    run = tmp_path / "run"
    assert main(micro_run_args(tmp_path, steps=2) + ["--out", str(run)]) == 0
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    paths = [r for r in events if r["kind"] == "event" and r["event"] == "paths"]
    assert [r["step"] for r in paths] == [1]
    assert paths[0]["detail"] == "layers 0  attn: sdpa.causal (softmax attention, is_causal)"  # the micro model: one layer
    assert path_lines([(0, "a", "sdpa.causal", "why"), (1, "a", "sdpa.causal", "why"), (2, "b", "reference.chunked", "cpu")]) == [
        "layers 0-1  a: sdpa.causal (why)", "layers 2    b: reference.chunked (cpu)"]


@pytest.mark.parametrize("tf32", [True, False])
def test_the_tf32_setting_holds_for_the_run_and_is_put_back(tmp_path, monkeypatch, tf32):
    """`tf32` (RunConfig) sets torch's float32-matmul flag for the run (CUDA reads it; the chunked
    recurrences' float32 algebra is what it changes) and restores the process's own afterwards."""
    import torch

    seen = []
    real = seqdsl.train.run._train
    monkeypatch.setattr(seqdsl.train.run, "_train",
                        lambda *a, **k: seen.append(torch.backends.cuda.matmul.allow_tf32) or real(*a, **k))
    before = torch.backends.cuda.matmul.allow_tf32
    args = micro_run_args(tmp_path, steps=2) + ["--out", str(tmp_path / "run"), "--set", f"tf32={str(tf32).lower()}"]
    assert main(args) == 0
    assert seen == [tf32]
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_ctrl_c_before_the_first_checkpoint_but_after_an_evaluation_does_not_offer_a_refused_command(tmp_path):
    """A fresh start refuses a folder holding a run's evaluations (tests/train/test_faults.py), so
    the line must not offer one there."""
    from seqdsl.cli.train import interrupted_line

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 1, "tokens": 64, "loss": 5.0}) + "\n")
    assert "start again with: seqdsl train" in interrupted_line(run, ["train", "x.seq"])
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "eval", "step": 2, "domain": "code", "loss": 4.0}) + "\n")
    line = interrupted_line(run, ["train", "x.seq"])
    assert "start again in another --out" in line and "seqdsl train" not in line
