"""metrics.jsonl (one JSON object per line, appended and flushed) and the progress display."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


class MetricsLog:
    def __init__(self, path: Path):
        self.path = path

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after `step` (written by a run that was killed after its last
        checkpoint and will be redone by the resumed run), so the file reads as one run."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut short by the kill
            if record.get("step", 0) <= step:
                kept.append(line + "\n")
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, self.path)

    def write(self, record: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()


class Progress:
    """tqdm's bar when tqdm is installed and stderr is a terminal; else a plain line every
    `every` steps."""

    def __init__(self, total: int, start: int, every: int, enabled: bool = True):
        self.every, self.enabled, self.bar = every, enabled, None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True)
            except ImportError:
                pass

    def update(self, step: int, loss: float, tokens_per_s: float, mfu: float | None) -> None:
        """Count a step; the figures are shown once every `every` steps (the bar's counter moves
        every step)."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
        if step % self.every:
            return
        mfu_text = f"{100 * mfu:.1f}%" if mfu is not None else "n/a"
        if self.bar is not None:
            self.bar.set_postfix_str(f"loss {loss:.3f}  {tokens_per_s:,.0f} tok/s  MFU {mfu_text}")
        else:
            print(f"step {step}  loss {loss:.4f}  {tokens_per_s:,.0f} tok/s  MFU {mfu_text}",
                  file=sys.stderr, flush=True)

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
