"""Evaluation is visible while it runs: `evaluate` reports every forward, the progress display
shows the domain and forward an evaluation is at, and its time left counts the evaluations to
come instead of reading the last one as a slow step."""

from __future__ import annotations

import pytest
import torch

import seqdsl
from seqdsl.data.evalset import EvalSet
from seqdsl.run.loss import evaluate
from seqdsl.ir.presets import model_at
from seqdsl.lower.lm import LanguageModel
from seqdsl.train.metrics import Progress, RemainingTime, clock_text

SPEC = """
mixer attn { heads = 2  head_dim = 8  position = rope }
model micro { layers = 1  d_model = 16  vocab = 31  context = 8  mixer = attn }
"""


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_evaluate_reports_each_forward_with_its_domain():
    program = seqdsl.loads(SPEC).program
    lm = LanguageModel(program, model_at(program, "micro").model)
    forwards = []
    lm.register_forward_hook(lambda module, args, out: forwards.append(args[0].shape[0]))
    gen = torch.Generator().manual_seed(0)
    # a: 40 tokens, windows of 8 -> 4 full + a tail of 7 -> batches of 3: [3, 1] + tail = 3 forwards
    # b: 17 tokens -> 2 full windows, no tail -> 1 forward
    sets = {"a": EvalSet("a", torch.randint(0, 31, (40,), generator=gen), 40),
            "b": EvalSet("b", torch.randint(0, 31, (17,), generator=gen), 17)}
    calls = []
    evaluate(lm, sets, seq_len=8, batch_size=3, device="cpu", progress=lambda *c: calls.append(c))
    assert forwards == [3, 1, 1, 2]
    assert calls == [(0, 4, "a"), (1, 4, "a"), (2, 4, "a"), (3, 4, "a"), (3, 4, "b"), (4, 4, "b")]


def test_evaluations_left_are_counted_as_the_run_will_do_them():
    for total, every in [(10, 5), (10, 3), (7, 0), (12, 100)]:
        eta = RemainingTime(total, 0, eval_every=every, eval_tokens=1, step_tokens=1)
        for step in range(total + 1):
            # run.py evaluates after step s when s % eval_every == 0 or s is the last step
            expected = sum(1 for s in range(step + 1, total + 1) if s == total or (every and s % every == 0))
            assert eta.evaluations_after(step) == expected, (total, every, step)


def _plain_progress(clock, **kw) -> Progress:
    return Progress(10, 0, 1, bar=False, eval_every=5, eval_tokens=600, step_tokens=100, clock=clock, **kw)


def test_time_left_counts_evaluations_and_not_as_slow_steps(capsys):
    clock = FakeClock()
    progress = _plain_progress(clock)
    for step in range(1, 6):  # five steps of 1 s
        clock.now += 1.0
        progress.update(step, 2.0, 1000.0, None)
    # before any evaluation ran, each is estimated as a forward over 600 tokens at a third of
    # a step's time per 100 tokens: 1 s * 600 / (3 * 100) = 2 s; two are left (steps 5 and 10)
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"ETA {clock_text(5 * 1.0 + 2 * 2.0)}")

    progress.eval_begin(5)
    progress.eval_progress(0, 4, "web")
    clock.now += 10.0
    progress.eval_progress(2, 4, "web")  # half done in 10 s: 10 s of it left
    clock.now += 10.0
    progress.eval_progress(4, 4, "code")
    progress.eval_end()  # the evaluation took 20 s
    shown = capsys.readouterr().err.splitlines()
    assert shown[0] == f"evaluating at step 5: web, forward 0/4  ETA {clock_text(5 * 1.0 + 2 + 2)}"
    assert shown[1] == f"evaluating at step 5: web, forward 2/4  ETA {clock_text(10 + 5 * 1.0 + 2)}"

    clock.now += 1.0
    progress.update(6, 2.0, 1000.0, None)  # 21 s after step 5, 1 s of it a step
    assert progress.eta.step_s == pytest.approx(1.0)
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"step 6  loss 2.0000  1,000 tok/s  MFU n/a  ETA {clock_text(4 * 1.0 + 1 * 20.0)}")


def test_plain_lines_during_an_evaluation_are_spaced(capsys):
    clock = FakeClock()
    progress = _plain_progress(clock)
    progress.eval_begin(5)
    for done in range(0, 31):
        progress.eval_progress(done, 30, "web")
        clock.now += 1.0
    progress.eval_end()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[1].split()[1] for line in lines] == ["0/30", "10/30", "20/30"]


def test_the_bar_shows_the_evaluation_and_the_time_left(capsys):
    pytest.importorskip("tqdm")
    clock = FakeClock()
    progress = Progress(10, 0, 1, bar=True, eval_every=5, eval_tokens=600, step_tokens=100, clock=clock)
    for step in range(1, 6):
        clock.now += 1.0
        progress.update(step, 2.0, 1000.0, 0.25)
    progress.eval_begin(5)
    progress.eval_progress(0, 4, "web")
    err = capsys.readouterr().err
    assert "evaluating at step 5: web, forward 0/4  ETA 00:09" in err  # 5 steps + 2 evaluations of 2 s
    clock.now += 20.0
    progress.eval_progress(4, 4, "web")
    progress.eval_end()
    clock.now += 1.0
    progress.update(6, 2.0, 1000.0, 0.25)
    progress.close()
    assert "ETA 00:24  loss 2.000  1,000 tok/s  MFU 25.0%" in capsys.readouterr().err


def test_a_training_run_shows_its_evaluations_as_they_run(tmp_path, capsys, stdlib_sample):
    from seqdsl.cli.main import main
    from tests.train.helpers import MICRO_SPEC

    spec = tmp_path / "micro.seq"
    spec.write_text(MICRO_SPEC)
    args = ["train", str(spec), "--out", str(tmp_path / "run"), "--tokens", str(4 * 4 * 16), "--batch", "4",
            "--device", "cpu", "--set", "preset=null", "--set", "data.eval_tokens=200", "--set", "eval_every=4",
            "--set", "log_every=2"]
    assert main(args) == 0
    err = capsys.readouterr().err.splitlines()
    starts = [line for line in err if line.startswith("evaluating at step 4: docstrings, forward 0/")]
    assert len(starts) == 1 and "ETA" in starts[0]
    assert err.index(starts[0]) < next(i for i, line in enumerate(err) if line.startswith("eval at step 4:"))
    assert any(line.startswith("step 2  loss") and "ETA" in line for line in err)
