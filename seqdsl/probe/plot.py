"""Accuracy against difficulty: a panel per task, a line per spec, chance as a dotted line.
Difficulties are placed in order along the x axis, labelled by the knobs that vary in the panel.
Rendered with matplotlib's Agg backend; without matplotlib, `plot` returns None and the caller
says so (the table and records do not need it)."""

from __future__ import annotations

import math
from pathlib import Path

from seqdsl.errors import SeqError
from seqdsl.eval.plot import pyplot, save_figure


def _pyplot():
    """matplotlib's pyplot, or None without matplotlib (the probe's table does not need it)."""
    try:
        return pyplot()
    except SeqError:
        return None


def _level_key(level: dict) -> tuple:
    return tuple(sorted(level.items()))


def plot(records: list[dict], path: str | Path) -> Path | None:
    """Write the figure of `records` to `path`; None when matplotlib is not installed."""
    plt = _pyplot()
    if plt is None:
        return None
    tasks = list(dict.fromkeys(r["task"] for r in records))
    cols = min(3, len(tasks))
    rows = math.ceil(len(tasks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.0 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        mine = [r for r in records if r["task"] == task]
        levels = sorted({_level_key(r["level"]) for r in mine})
        varying = [k for k, _ in levels[0] if len({dict(lv)[k] for lv in levels}) > 1] or ["seq_len"]
        for label in dict.fromkeys(r["label"] for r in mine):
            points = sorted((levels.index(_level_key(r["level"])), r["accuracy"]) for r in mine
                            if r["label"] == label and r["accuracy"] is not None)
            if points:
                ax.plot([x for x, _ in points], [100 * y for _, y in points], marker="o", label=label)
        ax.axhline(100 * mine[0]["chance"], color="grey", linestyle=":", linewidth=1, label="chance")
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels(["\n".join(f"{k}={dict(lv)[k]}" for k in varying) for lv in levels], fontsize=8)
        ax.set_ylim(-2, 102)
        ax.set_title(task)
        ax.set_ylabel("answer accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(tasks):]:
        ax.set_visible(False)
    fig.tight_layout()
    return save_figure(fig, path)
