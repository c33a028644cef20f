"""Compare runs at matched training loss: OOD loss interpolated at chosen training-loss levels.

The paper's comparison (arXiv 2505.18522): two architectures trained on a limited domain are
compared on the other domains *at the same training loss*, not the same step, so a model that
merely learns faster is not credited with better generalisation.

For each run and each OOD domain (eval records with in_domain = false, at one seq_len):
- Each evaluation at step s is placed at the run's training loss at s: the mean loss of the
  last `window` train records with step <= s (train records are per-batch losses, noisy; the
  mean over the last few approximates the loss of the weights that were evaluated). An
  evaluation with no train record at or before its step (step 0) is left out.
- The OOD loss at training-loss level L is linearly interpolated between the two consecutive
  evaluations (in step order) whose training losses bracket L, the first such pair; exactly L
  takes that evaluation's value. A run whose training loss never came down to L says
  "not reached"; one already below L at its first evaluation says "below at first eval". There
  is no extrapolation.
- The gap is the run's value minus the baseline run's value at the same level and domain.
Default levels: three evenly inside the training-loss range every run covers (25/50/75 %); when
the runs share no range there are no levels (the table says why; the plot is still drawn).

This module imports neither torch nor matplotlib.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from seqdsl.errors import SeqError
from seqdsl.eval.metrics import EvalPoint, RunMetrics, TrainPoint

Metric = Literal["loss", "bpb"]
DEFAULT_WINDOW = 10
REACHED, NOT_REACHED, BELOW_AT_FIRST, NO_EVALS = "ok", "not reached", "below at first eval", "no evaluations"


@dataclass(frozen=True)
class Point:
    step: int
    train_loss: float  # nats/token, mean of the train records before `step`
    ood: float  # the evaluated domain's loss (nats/token) or bits/byte


@dataclass(frozen=True)
class Curve:
    run: RunMetrics
    seq_len: int | None  # the evaluations' context length (None: the run has no OOD evaluation)
    domains: dict[str, tuple[Point, ...]]  # OOD domain -> points in step order


@dataclass(frozen=True)
class Cell:
    value: float | None
    status: str  # REACHED, NOT_REACHED, BELOW_AT_FIRST or NO_EVALS
    gap: float | None = None  # value - baseline's value


@dataclass(frozen=True)
class Comparison:
    curves: tuple[Curve, ...]
    levels: tuple[float, ...]
    baseline: str  # a run's name
    metric: Metric
    window: int
    cells: dict[tuple[str, str, float], Cell] = field(default_factory=dict)  # (domain, run, level)
    note: str | None = None  # why there are no levels, when none could be chosen

    @property
    def domains(self) -> list[str]:
        return sorted({d for c in self.curves for d in c.domains})


def train_loss_at(train: tuple[TrainPoint, ...], step: int, window: int) -> float | None:
    """Mean loss of the last `window` train records with step <= `step` (None if there are none)."""
    before = [p.loss for p in train if p.step <= step][-window:]
    return sum(before) / len(before) if before else None


def _pick_seq_len(evals: list[EvalPoint], seq_len: int | None) -> int | None:
    """`seq_len` if given, else the context length most of the run's OOD evaluations used."""
    if seq_len is not None or not evals:
        return seq_len
    counts = Counter(p.seq_len for p in evals)
    return max(counts, key=lambda s: (counts[s], -s))


def curve(run: RunMetrics, *, metric: Metric = "loss", window: int = DEFAULT_WINDOW,
          seq_len: int | None = None) -> Curve:
    ood = [p for p in run.evals if not p.in_domain]
    chosen = _pick_seq_len(ood, seq_len)
    domains: dict[str, list[Point]] = {}
    for p in ood:
        if p.seq_len != chosen:
            continue
        t = train_loss_at(run.train, p.step, window)
        if t is not None:
            domains.setdefault(p.domain, []).append(Point(p.step, t, getattr(p, metric)))
    return Curve(run, chosen, {d: tuple(sorted(ps, key=lambda q: q.step)) for d, ps in domains.items()})


def at_level(points: tuple[Point, ...], level: float) -> tuple[float | None, str]:
    """The OOD value at training loss `level`, linearly interpolated (see the module doc)."""
    if not points:
        return None, NO_EVALS
    for a, b in zip(points, points[1:] + (None,)):
        if a.train_loss == level:
            return a.ood, REACHED
        if b is not None and (a.train_loss - level) * (b.train_loss - level) < 0:
            f = (level - a.train_loss) / (b.train_loss - a.train_loss)
            return a.ood + f * (b.ood - a.ood), REACHED
    if min(p.train_loss for p in points) > level:
        return None, NOT_REACHED
    return None, BELOW_AT_FIRST


def default_levels(curves: list[Curve], n: int = 3) -> tuple[tuple[float, ...], str | None]:
    """`n` levels evenly inside the training-loss range that every curve with points covers, or
    no levels and the reason."""
    spans = [(min(p.train_loss for p in ps), max(p.train_loss for p in ps))
             for c in curves for ps in c.domains.values() if ps]
    if not spans:
        return (), ("no run has an OOD evaluation after a training step (eval records with "
                    "in_domain = false): nothing to compare")
    lo, hi = max(s[0] for s in spans), min(s[1] for s in spans)
    if lo >= hi:
        return (), (f"the runs' evaluations share no training-loss range (the highest minimum is "
                    f"{lo:.4f}, the lowest maximum {hi:.4f}): choose levels with --at")
    return tuple(lo + (hi - lo) * (i + 1) / (n + 1) for i in range(n)), None


def compare(runs: list[RunMetrics], *, levels: list[float] | None = None, baseline: str | None = None,
            metric: Metric = "loss", window: int = DEFAULT_WINDOW, seq_len: int | None = None) -> Comparison:
    if not runs:
        raise SeqError("no runs to compare")
    if window < 1:
        raise SeqError(f"the training-loss window must be at least 1 record, got {window}")
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise SeqError(f"two runs share a directory name ({', '.join(names)}); rename one")
    base = names[0] if baseline is None else baseline
    if base not in names:
        raise SeqError(f"baseline {base!r} is not one of the runs", hint=f"runs: {', '.join(names)}")
    curves = [curve(r, metric=metric, window=window, seq_len=seq_len) for r in runs]
    note = None
    if levels:
        chosen = tuple(sorted(levels, reverse=True))
    else:
        chosen, note = default_levels(curves)
    cells: dict[tuple[str, str, float], Cell] = {}
    by_name = {c.run.name: c for c in curves}
    domains = sorted({d for c in curves for d in c.domains})
    for domain in domains:
        for level in chosen:
            ref, _ = at_level(by_name[base].domains.get(domain, ()), level)
            for c in curves:
                value, status = at_level(c.domains.get(domain, ()), level)
                gap = value - ref if value is not None and ref is not None else None
                cells[(domain, c.run.name, level)] = Cell(value, status, gap)
    return Comparison(tuple(curves), chosen, base, metric, window, cells, note)


UNIT = {"loss": "nats/token", "bpb": "bits/byte"}


def markdown(cmp: Comparison) -> str:
    """One table per OOD domain: a row per run, a value and a gap column per level."""
    out = [f"OOD {cmp.metric} ({UNIT[cmp.metric]}) at matched training loss (nats/token; "
           f"mean of the last {cmp.window} train records before each evaluation); "
           f"gap = run - baseline `{cmp.baseline}`."]
    if cmp.note:
        out.append(f"No training-loss levels: {cmp.note}.")
    for domain in cmp.domains:
        out += ["", f"### {domain}", ""]
        head = ["run", "model", "seq_len"] + [h for lv in cmp.levels for h in (f"train {lv:.3f}", "gap")]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for c in cmp.curves:
            row = [c.run.name + (" (baseline)" if c.run.name == cmp.baseline else ""), c.run.label,
                   str(c.seq_len or "-")]
            for lv in cmp.levels:
                cell = cmp.cells[(domain, c.run.name, lv)]
                row.append(f"{cell.value:.4f}" if cell.value is not None else cell.status)
                row.append(f"{cell.gap:+.4f}" if cell.gap is not None and c.run.name != cmp.baseline else "")
            out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


def to_json(cmp: Comparison) -> dict:
    return {
        "metric": cmp.metric, "unit": UNIT[cmp.metric], "baseline": cmp.baseline,
        "train_loss_window": cmp.window, "levels": list(cmp.levels), "note": cmp.note,
        "runs": [{"name": c.run.name, "model": c.run.label, "path": str(c.run.path), "seq_len": c.seq_len,
                  "points": {d: [{"step": p.step, "train_loss": p.train_loss, "ood": p.ood} for p in ps]
                             for d, ps in c.domains.items()}}
                 for c in cmp.curves],
        "table": [{"domain": d, "run": r, "level": lv, "value": cell.value, "status": cell.status,
                   "gap": cell.gap}
                  for (d, r, lv), cell in cmp.cells.items()],
    }
