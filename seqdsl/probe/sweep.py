"""A probe sweep: every spec on every task, a model trained per (spec, task) and evaluated at each
of the task's difficulties; a record appended per result as it is measured.

Everything that can be refused is refused before the first model trains: specs that do not load
or resize, tasks whose difficulties cannot be generated, an output folder holding results
without `--resume`. With `--resume`, a (spec, task) whose every result is in probe.jsonl (same
model, task, difficulty and settings: records.result_key) is skipped; one with some results
missing is trained again, since training is what a result costs.
"""

from __future__ import annotations

import datetime
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from seqdsl import jsonl
from seqdsl.errors import SeqError
from seqdsl.probe.batch import Plan, ProbeError, Task
from seqdsl.probe.fit import Settings, score, train
from seqdsl.probe.model import ProbeModel, build, probe_model
from seqdsl.probe.records import RECORDS, read_records, result_key


@dataclass(frozen=True)
class Job:
    """One (spec, task): the model to train, the task and its plan."""

    model: ProbeModel
    task: Task
    plan: Plan

    def records(self, *, preset: str, keep_absolute: bool, settings: Settings) -> list[dict]:
        """The records of this job's results, without their measurements (what `--resume` compares)."""
        m = self.model
        return [{"kind": "probe", "spec": m.spec, "label": m.label, "model": m.model.name, "digest": m.digest,
                 "task": self.task.name, "vocab": self.task.vocab, "text": self.task.text_name,
                 "level": level.as_dict(),
                 "trained_at": [lv.as_dict() for lv in self.plan.train], "chance": self.task.chance(level),
                 "settings": settings.as_dict(), "preset": preset, "keep_absolute": keep_absolute,
                 "verdict": m.verdict, "verdict_probed": m.verdict_probed}
                for level in self.plan.evaluate]


def plan_jobs(specs: list[str], tasks: list[Task], *, seq_len: int, preset: str, model: str | None,
              keep_absolute: bool) -> list[Job]:
    """Every (spec, task) job, each spec loaded and resized and each difficulty checked: a bad
    input is one SeqError before anything trains."""
    jobs = []
    for task in tasks:
        plan = task.plan(seq_len)
        for level in plan.train + plan.evaluate:
            task.check_level(level)
    for spec in specs:
        for task in tasks:
            plan = task.plan(seq_len)
            context = max(level.seq_len for level in plan.train)
            jobs.append(Job(probe_model(spec, vocab=task.vocab, context=context, preset=preset, model=model,
                                        keep_absolute=keep_absolute), task, plan))
    return jobs


class Progress:
    """A line per (spec, task) started and finished, and while training either tqdm's bar (on a
    terminal, tqdm installed) or a plain line every `every` steps."""

    def __init__(self, enabled: bool, every: int = 100):
        self.enabled, self.every, self.bar = enabled, every, None

    def say(self, text: str) -> None:
        if self.enabled:
            (self.bar.write if self.bar is not None else print)(text, file=sys.stderr)

    def start(self, title: str, steps: int) -> Callable[[int, float], None]:
        self.say(title)
        self.bar = None
        if self.enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=steps, unit="step", dynamic_ncols=True, file=sys.stderr, leave=False)
            except ImportError:
                pass

        def step(done: int, loss: float) -> None:
            if not self.enabled:
                return
            if self.bar is not None:
                self.bar.update(1)
                self.bar.set_postfix_str(f"loss {loss:.3f}")
            elif done % self.every == 0 or done == steps:
                print(f"  step {done}/{steps}  loss {loss:.4f}", file=sys.stderr, flush=True)

        return step

    def end(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def run_sweep(jobs: list[Job], out: Path, *, settings: Settings, preset: str, keep_absolute: bool,
              device: torch.device, resume: bool, show_progress: bool = True) -> list[dict]:
    """Run `jobs`, appending each result to out/probe.jsonl; every record of the sweep (stored
    ones included when resuming), in job order."""
    path = out / RECORDS
    stored = read_records(path)
    if stored and not resume:
        raise SeqError(f"{out} already holds probe results ({path})",
                       hint="add --resume to skip the finished ones, or choose another --out")
    done = {result_key(r): r for r in stored}
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SeqError(f"cannot create {out}: {err.strerror or err}") from None
    progress = Progress(show_progress)
    if resume and jsonl.drop_cut_line(path):
        progress.say(f"note: dropped the last line of {path}, a record cut short")
    results: list[dict] = []
    for n, job in enumerate(jobs, 1):
        blanks = job.records(preset=preset, keep_absolute=keep_absolute, settings=settings)
        title = f"[{n}/{len(jobs)}] {job.model.label} on {job.task.name}"
        if all(result_key(b) in done for b in blanks):
            progress.say(f"{title}: done already ({path})")
            results += [done[result_key(b)] for b in blanks]
            continue
        for note in job.model.notes:
            progress.say(f"  note: {job.model.label}: preset {preset}, not kept: {note}")
        lm = build(job.model, settings.seed).to(device)
        started = time.perf_counter()
        losses = train(lm, job.task, job.plan.train, settings, device=device,
                       progress=progress.start(title, settings.steps))
        progress.end()
        seconds = time.perf_counter() - started
        tail = losses[-max(1, len(losses) // 10):]  # the last tenth of the steps, every training level
        limit = lm.positions_limit()
        for blank, level in zip(blanks, job.plan.evaluate):
            record = {**blank, "final_loss": sum(tail) / len(tail), "train_seconds": round(seconds, 2),
                      "device": str(device), "date": datetime.date.today().isoformat()}
            if limit is not None and level.seq_len > limit:
                record.update(accuracy=None, exact=None, answers=0, examples=0,
                              skipped=f"per-position parameters for {limit} tokens only")
            else:
                s = score(lm, job.task, level, settings, device=device)
                record.update(accuracy=s.accuracy, exact=s.exact, answers=s.answers, examples=s.examples)
            jsonl.append(path, [record])
            results.append(record)
            acc = "n/a" if record["accuracy"] is None else f"{100 * record['accuracy']:.1f}%"
            progress.say(f"  {level.label()}: accuracy {acc} (chance {100 * record['chance']:.1f}%)")
    return results


def check_positive(**values: int | float | None) -> None:
    for name, value in values.items():
        if value is not None and value <= 0:
            raise ProbeError(f"--{name.replace('_', '-')} must be positive, got {value}")
