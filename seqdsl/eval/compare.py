"""Compare runs at matched training loss: held-out loss interpolated at chosen training-loss levels.

The paper's comparison (arXiv 2505.18522): two architectures trained on a limited domain are
compared on the other domains *at the same training loss*, not the same step, so a model that
merely learns faster is not credited with better generalisation.

For each run and each evaluated domain (one seq_len; OOD domains, eval records with
in_domain = false, and the training domain's held-out text, in_domain = true, tabulated apart):
- Each evaluation at step s is placed at the run's training loss at s: the mean loss of the
  last `window` train records with step <= s (train records are per-batch losses, noisy; the
  mean over the last few approximates the loss of the weights that were evaluated). An
  evaluation with no train record at or before its step (step 0) is left out.
- The value at training-loss level L is linearly interpolated between the two consecutive
  evaluations (in step order) whose training losses bracket L, the first such pair; exactly L
  takes that evaluation's value. A run whose training loss never came down to L says
  "not reached"; one already below L at its first evaluation says "below at first eval". There
  is no extrapolation.
- The gap is the run's value minus the baseline run's value at the same level and domain.
- A value is flagged EARLY when it uses the run's first evaluation (L lies before its second:
  early training, where the loss falls fastest and a straight line between two evaluations says
  least), and SPARSE when the two evaluations it is interpolated between are further apart in
  training loss than SPARSE_FRACTION (a quarter) of the whole range the run's evaluations of
  that domain span (so a run needs at least five evaluations evenly spread in training loss to
  have no sparse interval). Flagged values come with a warning; they can mislead, as levels that
  all fell between two runs' first two evaluations once showed a model worse OOD when it was
  better at every later evaluation.
Default levels: three evenly inside (25/50/75 %) the training-loss range that every run's
evaluations of every domain cover from their second evaluation on; when those share no range,
inside the range the evaluations cover at all (such levels lie before some run's second
evaluation and are flagged); when even that is empty there are no levels (the table says why;
the plot is still drawn). Levels run from high to low training loss, as training does.

This module imports neither torch nor matplotlib.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Literal

from seqdsl.errors import SeqError
from seqdsl.eval.metrics import EvalPoint, RunMetrics, TrainPoint

# loss: nats/token; bpb: bits/byte; recall_loss / other_loss: nats/token on the recall tokens
# (completing a bigram seen earlier in the window, seqdsl/run/recall.py) and on the others
Metric = Literal["loss", "bpb", "recall_loss", "other_loss"]
METRICS: tuple[Metric, ...] = ("loss", "bpb", "recall_loss", "other_loss")
DEFAULT_WINDOW = 10
REACHED, NOT_REACHED, BELOW_AT_FIRST, NO_EVALS = "ok", "not reached", "below at first eval", "no evaluations"
EARLY, SPARSE = "early", "sparse"  # why an interpolated value may mislead (module doc)
SPARSE_FRACTION = 0.25  # an interval wider than this share of the run's evaluated range is sparse
DEFAULT_FRACTIONS = (0.25, 0.5, 0.75)  # where the default levels sit inside the shared range
FLAG_MARK = "!"  # after a table value (or gap) that has flags


@dataclass(frozen=True)
class Point:
    step: int
    train_loss: float  # nats/token, mean of the train records before `step`
    ood: float  # the evaluated domain's loss (nats/token) or bits/byte (in-domain points too)


Points = tuple[Point, ...]


@dataclass(frozen=True)
class Curve:
    run: RunMetrics
    seq_len: int | None  # the evaluations' context length (None: the run has no evaluation)
    domains: dict[str, Points]  # OOD domain -> points in step order
    in_domain: dict[str, Points] = field(default_factory=dict)  # training domain(s) -> points


@dataclass(frozen=True)
class Cell:
    value: float | None
    status: str  # REACHED, NOT_REACHED, BELOW_AT_FIRST or NO_EVALS
    gap: float | None = None  # value - baseline's value
    flags: tuple[str, ...] = ()  # EARLY, SPARSE
    steps: tuple[int, int] | None = None  # the evaluations it comes from (the same twice: exactly at one)


Cells = dict[tuple[str, str, float], Cell]  # (domain, run, level) -> cell


@dataclass(frozen=True)
class Comparison:
    curves: tuple[Curve, ...]
    levels: tuple[float, ...]
    baseline: str  # a run's name
    metric: Metric
    window: int
    cells: Cells = field(default_factory=dict)  # OOD domains
    note: str | None = None  # why there are no levels, when none could be chosen
    in_domain_cells: Cells = field(default_factory=dict)  # the training domains' held-out text
    levels_note: str | None = None  # how the levels were chosen
    warnings: tuple[str, ...] = ()  # one line per run and stretch of training with flagged values

    @property
    def domains(self) -> list[str]:
        return sorted({d for c in self.curves for d in c.domains})

    @property
    def in_domains(self) -> list[str]:
        return sorted({d for c in self.curves for d in c.in_domain})


def train_loss_at(train: tuple[TrainPoint, ...], step: int, window: int) -> float | None:
    """Mean loss of the last `window` train records with step <= `step` (None if there are none)."""
    before = [p.loss for p in train if p.step <= step][-window:]
    return sum(before) / len(before) if before else None


def _pick_seq_len(evals: list[EvalPoint], seq_len: int | None) -> int | None:
    """`seq_len` if given, else the context length most of the run's evaluations used."""
    if seq_len is not None or not evals:
        return seq_len
    counts = Counter(p.seq_len for p in evals)
    return max(counts, key=lambda s: (counts[s], -s))


def curve(run: RunMetrics, *, metric: Metric = "loss", window: int = DEFAULT_WINDOW,
          seq_len: int | None = None) -> Curve:
    ood = [p for p in run.evals if not p.in_domain]
    chosen = _pick_seq_len(ood or list(run.evals), seq_len)  # OOD evaluations decide, when there are any
    by_kind: dict[bool, dict[str, list[Point]]] = {False: {}, True: {}}
    for p in run.evals:
        if p.seq_len != chosen:
            continue
        t = train_loss_at(run.train, p.step, window)
        value = getattr(p, metric)
        if t is not None and value is not None:  # recall_loss: absent from records made without it
            by_kind[p.in_domain].setdefault(p.domain, []).append(Point(p.step, t, value))

    def in_step_order(domains: dict[str, list[Point]]) -> dict[str, Points]:
        return {d: tuple(sorted(ps, key=lambda q: q.step)) for d, ps in domains.items()}

    return Curve(run, chosen, in_step_order(by_kind[False]), in_step_order(by_kind[True]))


def locate(points: Points, level: float) -> Cell:
    """The value at training loss `level`, linearly interpolated (see the module doc), with the
    evaluations it comes from and its flags."""
    if not points:
        return Cell(None, NO_EVALS)
    for i, a in enumerate(points):
        if a.train_loss == level:
            return _located(points, i, i, a.ood)
        b = points[i + 1] if i + 1 < len(points) else None
        if b is not None and (a.train_loss - level) * (b.train_loss - level) < 0:
            f = (level - a.train_loss) / (b.train_loss - a.train_loss)
            return _located(points, i, i + 1, a.ood + f * (b.ood - a.ood))
    if min(p.train_loss for p in points) > level:
        return Cell(None, NOT_REACHED)
    return Cell(None, BELOW_AT_FIRST)


def _located(points: Points, i: int, j: int, value: float) -> Cell:
    return Cell(value, REACHED, flags=flags(points, i, j), steps=(points[i].step, points[j].step))


def flags(points: Points, i: int, j: int) -> tuple[str, ...]:
    """EARLY when a value from evaluations i..j (consecutive, or i == j) uses the run's first
    evaluation; SPARSE when i and j are further apart in training loss than SPARSE_FRACTION of
    the range all of `points` span."""
    span = max(p.train_loss for p in points) - min(p.train_loss for p in points)
    width = abs(points[i].train_loss - points[j].train_loss)
    return tuple(name for name, on in ((EARLY, i == 0), (SPARSE, i != j and width > SPARSE_FRACTION * span))
                 if on)


def _shared_range(tables: list[Points]) -> tuple[float, float]:
    """(highest minimum, lowest maximum) of the tables' training losses: a range when lo < hi."""
    if not tables or not all(tables):
        return float("inf"), float("-inf")
    return (max(min(p.train_loss for p in ps) for ps in tables),
            min(max(p.train_loss for p in ps) for ps in tables))


def _evenly(lo: float, hi: float) -> tuple[float, ...]:
    return tuple(sorted((lo + (hi - lo) * f for f in DEFAULT_FRACTIONS), reverse=True))


def default_levels(curves: list[Curve]) -> tuple[tuple[float, ...], str]:
    """The default levels (module doc) and a sentence saying how they were chosen, or no levels
    and the reason."""
    tables = [ps for c in curves for kind in (c.domains, c.in_domain) for ps in kind.values() if ps]
    if not tables:
        return (), ("no run has an evaluation after a training step (eval records in "
                    "metrics.jsonl): nothing to compare")
    where = "/".join(f"{100 * f:g}" for f in DEFAULT_FRACTIONS) + " %"
    lo, hi = _shared_range([ps[1:] for ps in tables])
    if lo < hi:
        return _evenly(lo, hi), (f"by default at {where} of [{lo:.3f}, {hi:.3f}], the training-loss range "
                                 f"every run's evaluations cover from its second evaluation on")
    lo, hi = _shared_range(tables)
    if lo < hi:
        return _evenly(lo, hi), (f"by default at {where} of [{lo:.3f}, {hi:.3f}], the training-loss range "
                                 f"every run's evaluations cover; from their second evaluations on they "
                                 f"share none, so the levels lie before some run's second evaluation")
    once = sorted({c.run.name for c in curves for kind in (c.domains, c.in_domain) for ps in kind.values()
                   if len(ps) == 1})
    if once:
        return (), (f"{', '.join(once)} evaluated only once, and matching training loss takes two "
                    f"evaluations of every run to interpolate between: evaluate more often (eval_every); "
                    f"the last eval column compares the runs at unmatched training loss")
    return (), (f"the runs' evaluations share no training-loss range (the highest minimum is "
                f"{lo:.4f}, the lowest maximum {hi:.4f}): choose levels with --at")


def _table(curves: list[Curve], kind: Callable[[Curve], dict[str, Points]], levels: tuple[float, ...],
           base: str) -> Cells:
    """Every (domain, run, level) cell of one kind of domain (OOD or in-domain), gaps to `base`."""
    cells: Cells = {}
    base_curve = next(c for c in curves if c.run.name == base)
    for domain in sorted({d for c in curves for d in kind(c)}):
        for level in levels:
            ref = locate(kind(base_curve).get(domain, ()), level).value
            for c in curves:
                cell = locate(kind(c).get(domain, ()), level)
                gap = cell.value - ref if cell.value is not None and ref is not None else None
                cells[(domain, c.run.name, level)] = replace(cell, gap=gap)
    return cells


def _warnings(curves: list[Curve], *tables: Cells) -> tuple[str, ...]:
    """One line per run and pair of evaluations that flagged values come from, naming the levels
    (domains evaluated at the same steps share a line)."""
    points = {(c.run.name, d): ps for c in curves for kind in (c.domains, c.in_domain) for d, ps in kind.items()}
    grouped: dict[tuple, list[float]] = {}
    for cells in tables:
        for (domain, run, level), cell in cells.items():
            if cell.flags:
                ps = points[(run, domain)]
                a, b = (next(p for p in ps if p.step == s) for s in cell.steps)
                span = max(p.train_loss for p in ps) - min(p.train_loss for p in ps)
                key = (run, (a.step, a.train_loss), (b.step, b.train_loss), cell.flags, round(span, 9), len(ps))
                if level not in grouped.setdefault(key, []):
                    grouped[key].append(level)
    return tuple(_warning(*key, levels) for key, levels in grouped.items())


def _warning(run: str, a: tuple[int, float], b: tuple[int, float], flagged: tuple[str, ...], span: float,
             evaluations: int, levels: list[float]) -> str:
    """`a`, `b`: (step, training loss) of the evaluations the values come from; `span`: the
    training-loss range of the run's `evaluations`."""
    at = ", ".join(f"{lv:.3f}" for lv in sorted(levels, reverse=True))
    if a == b:
        return f"{run} at {at}: exactly its first evaluation (step {a[0]}), before its second"
    where = f"interpolated between steps {a[0]} and {b[0]} (training loss {a[1]:.3f} -> {b[1]:.3f})"
    if evaluations == 2:
        return f"{run} at {at}: {where}, its only two evaluations"
    why = []
    if EARLY in flagged:
        why.append("before its second evaluation")
    if SPARSE in flagged:
        why.append(f"a sparse interval ({abs(a[1] - b[1]):.3f} wide, over {100 * SPARSE_FRACTION:g} % of "
                   f"the {span:.3f} its evaluations span)")
    return f"{run} at {at}: {where}: {'; '.join(why)}"


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
    partial = _without_split(runs, metric)
    lengths = sorted({p.seq_len for r in runs for p in r.evals})
    if seq_len is not None and lengths and seq_len not in lengths:
        raise SeqError(f"no run has an evaluation at --seq-len {seq_len}",
                       hint=f"the runs were evaluated at {', '.join(map(str, lengths))}")
    curves = [curve(r, metric=metric, window=window, seq_len=seq_len) for r in runs]
    if levels:
        chosen, how, note = tuple(sorted(levels, reverse=True)), "as given", None
    else:
        chosen, text = default_levels(curves)
        how, note = (text, None) if chosen else (None, text)
    ood = _table(curves, lambda c: c.domains, chosen, base)
    in_domain = _table(curves, lambda c: c.in_domain, chosen, base)
    return Comparison(tuple(curves), chosen, base, metric, window, ood, note, in_domain, how,
                      partial + _warnings(curves, in_domain, ood))


def _without_split(runs: list[RunMetrics], metric: Metric) -> tuple[str, ...]:
    """For the recall metrics: refuse runs with no recall split at all; a warning for each run
    that has it at some evaluations only (resumed across the version that added it): the others
    are left out of its curve."""
    if metric not in ("recall_loss", "other_loss"):
        return ()
    lacking = [r.name for r in runs if r.evals and all(getattr(p, metric) is None for p in r.evals)]
    if lacking:
        raise SeqError(f"no recall split in the evaluations of {', '.join(lacking)}",
                       hint="training records it when eval_recall = true (the default since 2026-11-27); "
                            "`seqdsl eval RUN --recall` measures it on a checkpoint")
    return tuple(f"{r.name}: {n} of its {len(r.evals)} evaluations have no recall split and are left out"
                 for r in runs if (n := sum(getattr(p, metric) is None for p in r.evals)))


UNIT = {"loss": "nats/token", "bpb": "bits/byte", "recall_loss": "nats/token on recall tokens",
        "other_loss": "nats/token on the other tokens"}


def markdown(cmp: Comparison) -> str:
    """The levels, the warnings, then one table per domain (in-domain first): a row per run, a
    value and a gap column per level, and the run's last evaluation."""
    levels = ", ".join(f"{lv:.3f}" for lv in cmp.levels)
    out = [f"Held-out {cmp.metric} ({UNIT[cmp.metric]}) at matched training loss (nats/token; "
           f"mean of the last {cmp.window} train records before each evaluation); "
           f"gap = run - baseline `{cmp.baseline}`; `last eval` is the run's latest evaluation, "
           f"at its own training loss (not matched)."]
    if cmp.note:
        out.append(f"No training-loss levels: {cmp.note}.")
    else:
        out.append(f"Levels {levels}: {cmp.levels_note}.")
    if cmp.warnings:
        out += ["", f"Warning: values marked {FLAG_MARK} are interpolated across a wide or early stretch "
                    f"of training and may mislead (docs/evaluation.md); evaluate more often "
                    f"(eval_every) or choose levels with --at:"]
        out += [f"- {w}" for w in cmp.warnings]
    for domain in cmp.in_domains:
        out += _domain_table(cmp, domain, in_domain=True)
    for domain in cmp.domains:
        out += _domain_table(cmp, domain, in_domain=False)
    return "\n".join(out)


def _domain_table(cmp: Comparison, domain: str, *, in_domain: bool) -> list[str]:
    cells = cmp.in_domain_cells if in_domain else cmp.cells
    title = f"{domain} (in-domain: held-out text of the training domain)" if in_domain else f"{domain} (OOD)"
    head = ["run", "model", "seq_len", *(h for lv in cmp.levels for h in (f"train {lv:.3f}", "gap")), "last eval"]
    out = ["", f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cmp.curves:
        is_base = c.run.name == cmp.baseline
        row = [c.run.name + (" (baseline)" if is_base else ""), c.run.label, str(c.seq_len or "-")]
        for lv in cmp.levels:
            cell = cells[(domain, c.run.name, lv)]
            base_flagged = bool(cells[(domain, cmp.baseline, lv)].flags)
            row.append(f"{cell.value:.4f}" + FLAG_MARK * bool(cell.flags) if cell.value is not None else cell.status)
            row.append(f"{cell.gap:+.4f}" + FLAG_MARK * (bool(cell.flags) or base_flagged)
                       if cell.gap is not None and not is_base else "")
        points = (c.in_domain if in_domain else c.domains).get(domain, ())
        row.append(f"{points[-1].ood:.4f} (train {points[-1].train_loss:.3f}, step {points[-1].step})"
                   if points else "-")
        out.append("| " + " | ".join(row) + " |")
    return out


def to_json(cmp: Comparison) -> dict:
    def points(domains: dict[str, Points]) -> dict:
        return {d: [{"step": p.step, "train_loss": p.train_loss, "ood": p.ood} for p in ps]
                for d, ps in domains.items()}

    def rows(cells: Cells, in_domain: bool) -> list[dict]:
        return [{"domain": d, "in_domain": in_domain, "run": r, "level": lv, "value": cell.value,
                 "status": cell.status, "gap": cell.gap, "flags": list(cell.flags),
                 "steps": list(cell.steps) if cell.steps else None}
                for (d, r, lv), cell in cells.items()]

    return {
        "metric": cmp.metric, "unit": UNIT[cmp.metric], "baseline": cmp.baseline,
        "train_loss_window": cmp.window, "levels": list(cmp.levels), "levels_note": cmp.levels_note,
        "note": cmp.note, "warnings": list(cmp.warnings),
        "runs": [{"name": c.run.name, "model": c.run.label, "path": str(c.run.path), "seq_len": c.seq_len,
                  "points": points(c.domains), "in_domain_points": points(c.in_domain)}
                 for c in cmp.curves],
        "table": rows(cmp.in_domain_cells, True) + rows(cmp.cells, False),
    }
