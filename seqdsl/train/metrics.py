"""metrics.jsonl (one JSON object per line, appended and flushed) and the progress display."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from seqdsl import jsonl


class MetricsLog:
    def __init__(self, path: Path):
        self.path = path

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after `step` (written by a run that was killed after its last
        checkpoint and will be redone by the resumed run), so the file reads as one run."""
        jsonl.keep_only(self.path, lambda record: record.get("step", 0) <= step)

    def write(self, record: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()


class RemainingTime:
    """Seconds left in a run: the steps left at the step time plus the evaluations left at the
    evaluation time (evaluations run every `eval_every` steps and after the last).

    The step time is a moving average (weight 0.3 on the newest, as tqdm's) of the time between
    two steps with any evaluation between them taken out: counted in, an evaluation reads as one
    very slow step and the estimate jumps after each. The evaluation time is the last
    evaluation's; before the first, it is estimated from the step time: a forward is about a third
    of a training step's work, so E evaluated tokens take about step_time * E / (3 * tokens per
    step)."""

    SMOOTHING = 0.3

    def __init__(self, total: int, start: int, *, eval_every: int, eval_tokens: int, step_tokens: int):
        self.total, self.step = total, start
        self.eval_every, self.eval_tokens, self.step_tokens = eval_every, eval_tokens, step_tokens
        self.step_s: float | None = None
        self.eval_s: float | None = None
        self.eval_due = False  # the evaluation after the last step, not started yet

    def evaluations_after(self, step: int) -> int:
        """How many evaluations run at steps in (step, total]."""
        if step >= self.total:
            return 0
        if not self.eval_every:
            return 1
        periodic = self.total // self.eval_every - step // self.eval_every
        return periodic + (1 if self.total % self.eval_every else 0)

    def step_done(self, step: int, seconds: float) -> None:
        a = self.SMOOTHING
        self.step_s = seconds if self.step_s is None else a * seconds + (1 - a) * self.step_s
        self.eval_due = self.evaluations_after(step - 1) > self.evaluations_after(step)
        self.step = step

    def eval_started(self) -> None:
        self.eval_due = False

    def eval_done(self, seconds: float) -> None:
        self.eval_s = seconds

    def eval_seconds(self) -> float:
        if self.eval_s is not None:
            return self.eval_s
        return (self.step_s or 0.0) * self.eval_tokens / (3 * self.step_tokens)

    def seconds_left(self, running_eval_left: float = 0.0) -> float | None:
        """None until a step has been timed; `running_eval_left`: what is left of an evaluation
        running now (not counted among the evaluations after the current step)."""
        if self.step_s is None:
            return None
        evaluations = self.evaluations_after(self.step) + self.eval_due
        return (self.total - self.step) * self.step_s + evaluations * self.eval_seconds() + running_eval_left


def clock_text(seconds: float | None) -> str:
    """`mm:ss`, or `h:mm:ss` from an hour; `?` when unknown."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class Progress:
    """tqdm's bar when tqdm is installed and stderr is a terminal (`bar` = True / False forces it
    on / off); else a plain line every `every` steps. Both give the time left (`RemainingTime`:
    evaluations included, at `eval_every` steps over `eval_tokens` tokens, against `step_tokens`
    tokens per step) and, during an evaluation, which domain and forward it is at: on the bar all
    along, as plain lines when it starts and every `EVAL_LINE_EVERY_S` seconds after."""

    EVAL_LINE_EVERY_S = 10.0  # plain lines during an evaluation (a log, not a terminal: no spam)
    BAR_REFRESH_S = 0.5  # the bar during an evaluation

    def __init__(self, total: int, start: int, every: int, enabled: bool = True, *, eval_every: int = 0,
                 eval_tokens: int = 0, step_tokens: int = 1, bar: bool | None = None, clock=time.perf_counter):
        self.every, self.enabled, self.bar, self.clock = every, enabled, None, clock
        self.eta = RemainingTime(total, start, eval_every=eval_every, eval_tokens=eval_tokens,
                                 step_tokens=step_tokens)
        self._mark = clock()  # when the last step ended (moved past evaluations)
        self._figures = ""  # the last step's loss, speed and MFU, for the bar
        self._eval: dict | None = None  # the evaluation running now: step, start, last shown
        if enabled and (sys.stderr.isatty() if bar is None else bar):
            try:
                from tqdm import tqdm

                # tqdm's own rate and remaining time would count evaluations as slow steps
                self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, file=sys.stderr,
                                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")
            except ImportError:
                pass

    def eval_size(self, tokens: int) -> None:
        """The tokens one evaluation scores, once the held-out sets are read (until then the
        remaining time counts the budget given at the start)."""
        self.eta.eval_tokens = tokens

    def update(self, step: int, loss: float, tokens_per_s: float, mfu: float | None) -> None:
        """Count a step; the figures are shown once every `every` steps (the bar's counter moves
        every step)."""
        now = self.clock()
        self.eta.step_done(step, now - self._mark)
        self._mark = now
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
        if step % self.every:
            return
        mfu_text = f"{100 * mfu:.1f}%" if mfu is not None else "n/a"
        eta = clock_text(self.eta.seconds_left())
        if self.bar is not None:
            self._figures = f"loss {loss:.3f}  {tokens_per_s:,.0f} tok/s  MFU {mfu_text}"
            self.bar.set_postfix_str(f"ETA {eta}  {self._figures}")
        else:
            print(f"step {step}  loss {loss:.4f}  {tokens_per_s:,.0f} tok/s  MFU {mfu_text}  ETA {eta}",
                  file=sys.stderr, flush=True)

    def eval_begin(self, step: int) -> None:
        self.eta.eval_started()
        self._eval = {"step": step, "start": self.clock(), "shown": None}

    def eval_progress(self, done: int, total: int, domain: str) -> None:
        """An evaluation's progress (seqdsl.run.loss.EvalProgress): `done` of `total` forwards,
        scoring `domain`."""
        if self._eval is None or not self.enabled:
            return
        now = self.clock()
        shown = self._eval["shown"]
        wait = self.BAR_REFRESH_S if self.bar is not None else self.EVAL_LINE_EVERY_S
        if shown is not None and now - shown < wait and done < total:
            return
        self._eval["shown"] = now
        elapsed = now - self._eval["start"]
        left = elapsed / done * (total - done) if done else self.eta.eval_seconds()
        text = (f"evaluating at step {self._eval['step']}: {domain}, forward {done}/{total}  "
                f"ETA {clock_text(self.eta.seconds_left(left))}")
        if self.bar is not None:
            self.bar.set_postfix_str(text)
        elif done < total:  # the end is the evaluation's own result line
            print(text, file=sys.stderr, flush=True)

    def eval_end(self) -> None:
        """Time the evaluation (and keep it out of the next step's time)."""
        if self._eval is None:
            return
        seconds = self.clock() - self._eval["start"]
        self.eta.eval_done(seconds)
        self._mark += seconds
        self._eval = None
        if self.enabled and self.bar is not None:
            self.bar.set_postfix_str(f"ETA {clock_text(self.eta.seconds_left())}  {self._figures}")

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
