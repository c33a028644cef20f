"""docs/probe_results.md from the probe sweep's records (docs/probe_results/, made by
experiments/probe_sweep.py collect): every figure and sentence of the page is computed here.

    python experiments/probe_report.py            # write the page and its plot
    python experiments/probe_report.py --check    # exit 1 when the page differs from the records

How a verdict is held against the probes: a difficulty informs the judgement only where the
reference spec (Transformer++) learnt it, i.e. the mean accuracy of its seeds there is at least
LEARNT, and only at difficulties the models were trained at (the checker makes no claim about
length generalisation). A spec falls short at such a difficulty when its accuracy is below the
reference's mean by more than the reference's seed range (at least FLOOR). A pass verdict
predicts no shortfall; degraded or fail predicts one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # seqdsl from this checkout, as experiments/report.py
sys.path.insert(0, str(REPO / "experiments"))
from probe_sweep import TASK_ORDER  # noqa: E402  (the sweep's tasks, in its order)
RESULTS = REPO / "docs" / "probe_results"
PAGE = REPO / "docs" / "probe_results.md"
PLOT = RESULTS / "accuracy.png"
REFERENCE = "transformer"
LEARNT = 0.90  # the reference's mean accuracy at which a difficulty tells mixers apart
FLOOR = 0.02  # the least shortfall called one (the seed range can be 0 at 100%)
PILLARS = "VRN"  # the principle's pillars; W and M findings are about backends and hybrids
CONTROLS = ("a5", "s5")  # state tracking: no selection mixer should solve it at depth 2 (docs/probes.md)


@dataclass(frozen=True)
class Level:
    task: str
    level: str  # e.g. "seq_len=32 pairs=8"
    trained: bool  # the model was trained at this difficulty

    @property
    def column(self) -> str:
        return f"{self.task} {self.level}"


def level_of(record: dict) -> Level:
    text = " ".join(f"{k}={v}" for k, v in record["level"].items())
    return Level(record["task"], text, record["level"] in record["trained_at"])


def load(results: Path = RESULTS) -> tuple[list[dict], list[dict], dict]:
    read = lambda name: [json.loads(line) for line in (results / name).read_text().splitlines() if line.strip()]  # noqa: E731
    return read("probe.jsonl"), read("units.jsonl"), json.loads((results / "machine.json").read_text())


def check_settings(records: list[dict]) -> None:
    """One sweep, one training budget: results trained otherwise (a CPU dry run collected by
    mistake) would be compared as if alike."""
    budgets = {json.dumps({k: v for k, v in r["settings"].items() if k != "seed"} | {"preset": r.get("preset")},
                          sort_keys=True) for r in records}
    if len(budgets) > 1:
        raise SystemExit("error: the records were trained with different settings: " + " | ".join(sorted(budgets))
                         + " (collect one sweep's units; move the others aside)")


def accuracies(records: list[dict]) -> tuple[list[Level], dict[tuple[str, int], dict[Level, float | None]]]:
    """Every difficulty in record order, and (spec, seed) -> difficulty -> accuracy."""
    levels: list[Level] = []
    table: dict[tuple[str, int], dict[Level, float | None]] = defaultdict(dict)
    for r in records:
        lv = level_of(r)
        if lv not in levels:
            levels.append(lv)
        table[(r["label"], r["settings"]["seed"])][lv] = r["accuracy"]
    return levels, table


@dataclass(frozen=True)
class Bar:
    """What the reference sets at one difficulty: its seeds' mean and range."""

    mean: float
    spread: float

    @property
    def informative(self) -> bool:
        return self.mean >= LEARNT

    @property
    def tolerance(self) -> float:
        return max(self.spread, FLOOR)


def bars(levels: list[Level], table: dict) -> dict[Level, Bar]:
    out = {}
    for lv in levels:
        got = [acc[lv] for (spec, _), acc in table.items() if spec == REFERENCE and acc.get(lv) is not None]
        if got:
            out[lv] = Bar(sum(got) / len(got), max(got) - min(got))
    return out


def pillars(verdict: str) -> str:
    """The failed pillars of a verdict text such as 'fail (V004, N001, W003)'."""
    codes = verdict.partition("(")[2].rstrip(")").split(", ") if "(" in verdict else []
    deciding = [c for c in codes if c[:1] in PILLARS]
    return f"{'/'.join(sorted({c[0] for c in deciding}))} ({', '.join(deciding)})" if deciding else "none"


@dataclass(frozen=True)
class Judgement:
    spec: str
    verdict: str  # pass | degraded | fail, of the model as probed
    pillars: str
    short: tuple[tuple[Level, float, float], ...]  # (difficulty, accuracy, the reference's mean)
    judged: int  # informative difficulties the spec has a result at

    @property
    def agrees(self) -> str:
        if self.judged == 0:
            return "not judged (no informative result)"
        if self.pillars == "none":  # pass, or a verdict from backend/hybrid findings alone
            why = "pass" if self.verdict == "pass" else f"{self.verdict} (no failed pillar)"
            return "yes" if not self.short else f"no: short where {why} predicts none"
        return "yes" if self.short else "no: no shortfall seen at this size"


def judge(spec: str, verdict_text: str, accs: dict[Level, float | None], bar: dict[Level, Bar]) -> Judgement:
    short, judged = [], 0
    for lv, b in bar.items():
        acc = accs.get(lv)
        if not (lv.trained and b.informative) or acc is None:
            continue
        judged += 1
        if acc < b.mean - b.tolerance:
            short.append((lv, acc, b.mean))
    return Judgement(spec, verdict_text.split(" ")[0], pillars(verdict_text), tuple(short), judged)


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def judgements(records: list[dict]) -> tuple[list[Level], dict, dict[Level, Bar], list[Judgement]]:
    levels, table = accuracies(records)
    bar = bars(levels, table)
    verdicts = {r["label"]: r["verdict_probed"] for r in records}
    specs = sorted({spec for spec, _ in table} - {REFERENCE})  # the reference sets the bar: not judged by it
    return levels, table, bar, [judge(s, verdicts[s], table[(s, 0)], bar) for s in specs if (s, 0) in table]


def verdict_table(levels: list[Level], table: dict, bar: dict[Level, Bar], found: list[Judgement]) -> list[str]:
    judged = [lv for lv in levels if lv in bar and lv.trained and bar[lv].informative]
    head = ["spec", "verdict (as probed)", "failed pillars", *(f"{lv.column} %" for lv in judged), "short at", "agrees"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ref = " / ".join(f"{100 * bar[lv].mean:.1f} ± {100 * bar[lv].tolerance:.1f}" for lv in judged)
    lines.append(f"| *{REFERENCE}, seeds' mean ± tolerance* | | | {ref.replace(' / ', ' | ')} | | |")
    for j in found:
        cells = [pct(table[(j.spec, 0)].get(lv)) for lv in judged]
        short = ", ".join(lv.column for lv, _, _ in j.short) or "none"
        lines.append(f"| {j.spec} | {j.verdict} | {j.pillars} | {' | '.join(cells)} | {short} | {j.agrees} |")
    return lines


def accuracy_table(levels: list[Level], table: dict) -> list[str]:
    """Every result, a row per (spec, seed): what the plot shows, in numbers."""
    tasks = list(dict.fromkeys(lv.task for lv in levels))
    lines = []
    for task in tasks:
        cols = [lv for lv in levels if lv.task == task]
        lines += [f"**{task}** (accuracy %; `*` marks a difficulty trained at)", "",
                  "| spec | " + " | ".join(f"{lv.level}{'*' if lv.trained else ''}" for lv in cols) + " |",
                  "|" + "---|" * (len(cols) + 1)]
        for (spec, seed) in sorted(table, key=lambda k: (k[0] != REFERENCE, k)):
            if any(lv in table[(spec, seed)] for lv in cols):
                name = spec if seed == 0 else f"{spec} (seed {seed})"
                lines.append(f"| {name} | " + " | ".join(pct(table[(spec, seed)].get(lv)) for lv in cols) + " |")
        lines.append("")
    return lines


def elimination(levels: list[Level]) -> list[float] | None:
    """MQAR's accuracy without recall at each level: with P pairs all queried once in random
    order, answering with a value not yet given scores 1/P, 1/(P-1), ..., 1 over the queries,
    a mean of H_P / P (the harmonic number). None unless every level queries each pair once."""
    out = []
    for lv in levels:
        fields = dict(part.split("=") for part in lv.level.split())
        if "pairs" not in fields or fields.get("queries") != fields["pairs"]:
            return None
        pairs = int(fields["pairs"])
        out.append(sum(1 / n for n in range(1, pairs + 1)) / pairs)
    return out


def short_convolutions(records: list[dict]) -> dict[str, bool]:
    """spec label -> whether a mixer of its model has a short convolution or token shift (the IR's
    `conv` slot, read from the spec file the records name)."""
    from seqdsl.passes.resolve import load as load_spec

    out = {}
    for label, path in {r["label"]: r["spec"] for r in records}.items():
        program = load_spec(REPO / path).program
        used = set(program.models[-1].mixer)
        out[label] = any(m.conv.kind != "none" for m in program.mixers if m.name in used)
    return out


def statement(levels: list[Level], table: dict, bar: dict[Level, Bar], found: list[Judgement],
              short_conv: dict[str, bool]) -> list[str]:
    yes = [j.spec for j in found if j.agrees == "yes"]
    lines = [f"The verdict and the probes agree for {len(yes)} of {len(found)} specs"
             + (f" ({', '.join(yes)})." if yes else ".")]
    for j in found:
        if j.agrees.startswith("no"):
            where = "; ".join(f"{lv.column}: {pct(a)} against {pct(m)}" for lv, a, m in j.short)
            lines.append(f"- **{j.spec}**: `seqdsl check` says {j.verdict} ({j.pillars}); "
                         + (f"short at {where}." if j.short else "no shortfall at any informative difficulty."))
    unlearnt = [lv for lv in levels if lv.trained and lv in bar and not bar[lv].informative]
    for task in dict.fromkeys(lv.task for lv in levels if lv.task in CONTROLS):
        cols = [lv for lv in levels if lv.task == task]
        firsts = {spec: acc for (spec, seed), acc in table.items() if seed == 0}
        best = max(((acc.get(cols[-1]) or 0, spec) for spec, acc in firsts.items()), default=(0, "none"))
        solved = sorted(spec for spec, acc in firsts.items() if all((acc.get(lv) or 0) >= LEARNT for lv in cols))
        lines.append(f"- **{task}, the negative control**: specs at {100 * LEARNT:.0f}% or more at every length: "
                     f"{', '.join(solved) or 'none'}; the best at {cols[-1].level}: {best[1]}, {pct(best[0])}%.")
    for task in dict.fromkeys(lv.task for lv in unlearnt if lv.task not in CONTROLS):
        missed = [lv for lv in unlearnt if lv.task == task]
        cols = [lv for lv in levels if lv.task == task and lv.trained]
        solved = sorted(spec for (spec, seed), acc in table.items()
                        if seed == 0 and all((acc.get(lv) or 0) >= LEARNT for lv in cols))
        line = (f"- **{task} is not judged at {', '.join(lv.level for lv in missed)}**: {REFERENCE} reached "
                + ", ".join(f"{pct(bar[lv].mean)}%" for lv in missed) + f" there (below {100 * LEARNT:.0f}%). "
                + f"Specs at {100 * LEARNT:.0f}% or more at every trained difficulty: {', '.join(solved) or 'none'}")
        if task == "mqar" and (guess := elimination(missed)):
            line += ("; answering each query with a value not yet asked for, without recall, scores "
                     + ", ".join(f"{pct(g)}%" for g in guess) + f" there ({REFERENCE}'s plateau)")
        if task == "induction":  # the mechanism this task needs first: each position's predecessor
            shifted = [spec for spec in solved if short_conv.get(spec)]
            line += (f"; {len(shifted)} of these {len(solved)} have a short convolution or token shift (of the "
                     f"{sum(short_conv.values())} specs that have one), which hands each position its predecessor, "
                     "the first step of an induction circuit")
        lines.append(line + ".")
    longer = [lv for lv in levels if not lv.trained and lv in bar]
    for task in dict.fromkeys(lv.task for lv in longer):
        last = [lv for lv in longer if lv.task == task][-1]
        held = sorted(spec for (spec, seed), acc in table.items() if seed == 0 and (acc.get(last) or 0) >= LEARNT)
        lines.append(f"- **{task} beyond the trained length** (not judged: the checker makes no length claim): "
                     f"at {last.level}, {REFERENCE} {pct(bar[last].mean)}%; at {100 * LEARNT:.0f}% or more: "
                     f"{', '.join(held) or 'none'}.")
    return lines


def times(units: list[dict]) -> list[str]:
    per: dict[str, list[float]] = defaultdict(list)
    for u in units:
        if u["rc"] == 0:
            per[u["spec"]].append(u["wall_s"])
    lines = ["| spec | units | wall time (s), summed | slowest unit (s) |", "|---|---|---|---|"]
    for spec in sorted(per, key=lambda s: -sum(per[s])):
        lines.append(f"| {spec} | {len(per[spec])} | {sum(per[spec]):,.0f} | {max(per[spec]):,.0f} |")
    return lines


def plot(levels: list[Level], table: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(table, key=lambda k: (k[0] != REFERENCE, k))
    grid = [[table[row].get(lv) for lv in levels] for row in rows]
    fig, ax = plt.subplots(figsize=(0.55 * len(levels) + 4, 0.3 * len(rows) + 2.5))
    image = ax.imshow([[float("nan") if a is None else 100 * a for a in row] for row in grid],
                      cmap="viridis", vmin=0, vmax=100, aspect="auto")
    for i, row in enumerate(grid):
        for k, a in enumerate(row):
            if a is not None:
                ax.text(k, i, f"{100 * a:.0f}", ha="center", va="center", fontsize=6,
                        color="black" if a > 0.6 else "white")
    ax.set_xticks(range(len(levels)), [f"{lv.column}{'' if lv.trained else ' (longer)'}" for lv in levels],
                  rotation=70, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), [s if seed == 0 else f"{s} (seed {seed})" for s, seed in rows], fontsize=7)
    fig.colorbar(image, ax=ax, label="accuracy %", fraction=0.02)
    ax.set_title("probe accuracy per spec and difficulty (blank: not run or not runnable)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def absent(records: list[dict]) -> dict[str, list[str]]:
    """task -> the specs of the sweep with no result for it (the GPU time ran out first)."""
    specs = sorted({r["label"] for r in records})
    done = {(r["label"], r["task"]) for r in records}
    tasks = dict.fromkeys(r["task"] for r in records)
    return {t: missing for t in tasks if (missing := [s for s in specs if (s, t) not in done])}


def page(records: list[dict], units: list[dict], machine: dict) -> str:
    levels, table, bar, found = judgements(records)
    s = records[0]["settings"]
    tasks = list(dict.fromkeys(lv.task for lv in levels))
    missing = sorted({(u["spec"], u["task"]) for u in units if u["rc"] != 0})  # failed, or past --timeout
    command = next(u for u in units if u["rc"] == 0)
    env = " ".join(f"{k}={v}" for k, v in command["env"].items())
    return "\n".join([
        "# Probe sweep: each `seqdsl check` verdict against synthetic tasks",
        "",
        "Generated by `experiments/probe_report.py` from `docs/probe_results/` (the records of "
        "`experiments/probe_sweep.py`); do not edit by hand. What the tasks are and how they are scored: docs/probes.md.",
        "",
        "## Set-up",
        "",
        f"- **Specs**: {len({spec for spec, _ in table})} of specs/, each file's last model resized to the "
        f"`{records[0]['preset']}` preset; {REFERENCE} with seeds "
        f"{', '.join(str(seed) for spec, seed in sorted(table) if spec == REFERENCE)}, the others seed 0.",
        f"- **Tasks**: {', '.join(tasks)}; {len(records)} results from {sum(u['rc'] == 0 for u in units)} "
        f"(spec, task, seed) units."
        + (f" Units that failed or ran out of time: {', '.join(f'{a} on {b}' for a, b in missing)}." if missing else "")
        + "".join(f" No {task} result for {', '.join(specs)}." for task, specs in absent(records).items())
        + (f" Tasks of the sweep not run yet: {', '.join(unrun)}." if (unrun := [t for t in TASK_ORDER if t not in tasks])
           else ""),
        f"- **Training per unit**: {s['steps']} steps of {s['batch']} rows, AdamW at peak lr {s['lr']} "
        f"(warmup {s['warmup']}, cosine), weight decay {s['weight_decay']}, clip {s['clip']}; "
        f"{s['eval_examples']} rows scored per difficulty; float32.",
        f"- **Device**: {machine['device']}; {machine['workers']}"
        + (f"; GPUs the units name: {', '.join(sorted(names))}" if (names := {u['gpu_name'] for u in units if 'gpu_name' in u}) else "")
        + "; dates "
        f"{', '.join(sorted({r['date'] for r in records}))}. The path: `{env}` (the spec's meaning; docs/lowering.md).",
        "",
        "One unit's command, as it ran:",
        "",
        "```",
        command["command"],
        "```",
        "",
        "Rerun: `python experiments/probe_sweep.py run --out ROOT --gpus 0,1,2,3 --workers 6` (it skips the units "
        "docs/probe_results/ holds: move them aside to rerun everything), then "
        "`python experiments/probe_sweep.py collect --out ROOT` and `python experiments/probe_report.py`; on the "
        "device tool's GPU machines, `experiments/probe_gpu.sh` wraps the same steps in 10-minute calls.",
        "",
        "## Verdicts against probe accuracy",
        "",
        f"A difficulty judges a verdict where {REFERENCE} learnt it (its seeds' mean accuracy at least "
        f"{100 * LEARNT:.0f}%) and the models were trained at it. A spec is short there when below that mean by "
        f"more than {REFERENCE}'s seed range (at least {100 * FLOOR:.0f} points). A pass verdict predicts no "
        "shortfall; degraded or fail predicts one. Failed pillars are the V/R/N findings (backend and hybrid "
        "findings are left out).",
        "",
        *verdict_table(levels, table, bar, found),
        "",
        *statement(levels, table, bar, found, short_convolutions(records)),
        "",
        "## Every result",
        "",
        "![probe accuracy](probe_results/accuracy.png)",
        "",
        *accuracy_table(levels, table),
        "## Time per spec",
        "",
        "Wall time of each unit's `seqdsl probe` (start-up, training, scoring), with several units sharing a GPU.",
        "",
        *times(units),
        "",
        "## What this sweep can and cannot show",
        "",
        f"- One seed per spec ({len([1 for spec, _ in table if spec == REFERENCE])} for {REFERENCE}): a shortfall "
        "near the tolerance is weak evidence.",
        f"- Tiny models ({records[0]['preset']} preset) at short contexts and a fixed budget: a fixed-size state "
        "that holds every pair at this size may not at a larger one, so a fail verdict without a shortfall "
        "here is not evidence against the checker at scale.",
        "- A task the reference does not learn at this budget says more about optimisation than about "
        "selection, so it is shown but not judged.",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--check", action="store_true", help="compare docs/probe_results.md with the records")
    args = parser.parse_args(argv)
    records, units, machine = load(args.results)
    check_settings(records)
    text = page(records, units, machine)
    if args.check:
        same = PAGE.exists() and PAGE.read_text() == text
        print("docs/probe_results.md is up to date" if same else "docs/probe_results.md differs: run experiments/probe_report.py")
        return 0 if same else 1
    PAGE.write_text(text)
    levels, table = accuracies(records)
    plot(levels, table, PLOT)
    print(f"wrote {PAGE.relative_to(REPO)} and {PLOT.relative_to(REPO)} from {len(records)} results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
