"""Write docs/results.md and its plots from the study's run records (docs/results/runs/).

    python experiments/report.py            # reads docs/results/runs/*, writes docs/results.md + PNGs
    python experiments/report.py --check    # exit 1 if docs/results.md is not what the records give

Every number in the page comes from the records `experiments/study.py collect` copied: seqdsl's
own `metrics.jsonl`, `config.json`, `spec.seq`, the length evaluations (`eval_seq*.json`) and the
runner's `study.json`. Verdicts come from running the checker on each run's `spec.seq`. Nothing
is typed in by hand; the prose around the tables only states what the computed columns say.

How a gap is measured (the paper's comparison, seqdsl.eval.compare): each evaluation is placed at
the run's training loss then; a spec and every Transformer++ seed are interpolated at the same
training-loss level, the lowest of `compare`'s default levels that all of them cover from their
second evaluation on (the most trained point they share). The gap is the spec's held-out loss
minus the mean of the Transformer++ seeds' there; the seed spread is the seeds' range at that
level. A spec trained with several seeds (Mamba-2) is compared by its seeds' mean, at a level all
of them share, and its spread is the larger of the two seed ranges. A gap is called real only
when it is larger than the spread. A spec whose training loss
never enters the Transformer++ seeds' range has no matched level: its row says so and shows the
gap at equal steps instead, marked unmatched.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments.study import LENGTH_EVAL_TOKENS, STUDY  # noqa: E402  (the study's runs and length budget)
from seqdsl.check import check_paths  # noqa: E402
from seqdsl.check.engine import decides_verdict  # noqa: E402
from seqdsl.eval.compare import DEFAULT_WINDOW, Curve, curve, default_levels, locate, train_loss_at  # noqa: E402
from seqdsl.eval.metrics import read_run  # noqa: E402

RUNS = REPO / "docs" / "results" / "runs"
PAGE = REPO / "docs" / "results.md"
PLOT = REPO / "docs" / "results" / "ood_vs_train_loss.png"
MIXED_PLOT = REPO / "docs" / "results" / "mixed_vs_train_loss.png"
BASELINE = "transformer"
IN_DOMAIN = "web_blogs"


@dataclass(frozen=True)
class Record:
    name: str
    spec: str
    setting: str
    seed: int
    path: Path
    config: dict
    study: dict
    curve: Curve
    events: dict[str, dict]
    train: list[dict]
    log: str  # train.log: the commands as they ran and what they printed ("" when absent)

    @property
    def final_train_loss(self) -> float:
        """The training loss at the end: the mean of the last train records, as `compare` places
        an evaluation."""
        loss = train_loss_at(self.curve.run.train, self.config["steps"], DEFAULT_WINDOW)
        assert loss is not None, f"{self.name} has no train records"
        return loss

    @property
    def final_eval(self) -> dict[str, float]:
        steps = self.config["steps"]
        return {d: ps[-1].ood for d, ps in {**self.curve.domains, **self.curve.in_domain}.items() if ps[-1].step == steps}


def load(path: Path) -> Record:
    setting, spec, seed = path.name.split("-")
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    events = {r["event"]: r for r in rows if r["kind"] == "event"}
    log = path / "train.log"
    return Record(path.name, spec, setting, int(seed.removeprefix("s")), path,
                  json.loads((path / "config.json").read_text()), json.loads((path / "study.json").read_text()),
                  curve(read_run(path)), events, [r for r in rows if r["kind"] == "train"],
                  log.read_text() if log.exists() else "")


# ---------------------------------------------------------------- matched-loss gaps


@dataclass(frozen=True)
class Gap:
    level: float | None  # None: no matched level (then the values are at equal steps)
    gaps: dict[str, float]  # domain -> spec minus the baseline seeds' mean
    spreads: dict[str, float]  # domain -> the baseline seeds' range
    note: str = ""

    @property
    def ood_gap(self) -> float:
        return self.gaps["mean OOD"]

    @property
    def ood_spread(self) -> float:
        return self.spreads.get("mean OOD", float("nan"))


def values_at(rec: Record, level: float) -> dict[str, float]:
    out = {}
    for domain, points in {**rec.curve.domains, **rec.curve.in_domain}.items():
        cell = locate(points, level)
        if cell.value is not None:
            out[domain] = cell.value
    return out


def with_ood_mean(values: dict[str, float]) -> dict[str, float]:
    ood = [v for d, v in values.items() if d != IN_DOMAIN]
    return {**values, "mean OOD": statistics.fmean(ood)} if ood else values


def seed_range(values: list[dict[str, float]], domain: str) -> float:
    return max(v[domain] for v in values) - min(v[domain] for v in values)


def gap_to_baseline(runs: Record | list[Record], seeds: list[Record]) -> Gap:
    """The gap of a spec (one run, or the runs of its seeds) to the Transformer++ seeds."""
    runs = runs if isinstance(runs, list) else [runs]
    levels, _ = default_levels([*(r.curve for r in runs), *(s.curve for s in seeds)])
    if levels:
        level = min(levels)
        base = [with_ood_mean(values_at(s, level)) for s in seeds]
        mine = [with_ood_mean(values_at(r, level)) for r in runs]
        shared = [d for d in mine[0] if all(d in v for v in [*base, *mine])]
        return Gap(level, {d: statistics.fmean(v[d] for v in mine) - statistics.fmean(b[d] for b in base) for d in shared},
                   {d: max(seed_range(base, d), seed_range(mine, d)) for d in shared})
    # no shared training-loss range: compare the last evaluations (equal steps), and say so
    base = [with_ood_mean(s.final_eval) for s in seeds]
    mine = [with_ood_mean(r.final_eval) for r in runs]
    first = min(ps[0].train_loss for s in seeds for ps in s.curve.domains.values())
    final = statistics.fmean(r.final_train_loss for r in runs)
    return Gap(None, {d: statistics.fmean(v[d] for v in mine) - statistics.fmean(b[d] for b in base) for d in mine[0]},
               {d: max(seed_range(base, d), seed_range(mine, d)) for d in mine[0]},
               note=f"unmatched: its final training loss ({final:.2f}) stays above every {BASELINE} evaluation's "
                    f"(the first at {first:.2f}); gaps at equal steps")


def measured(gap: Gap) -> str:
    if gap.ood_gap > gap.ood_spread:
        return "worse OOD"
    if gap.ood_gap < -gap.ood_spread:
        return "better OOD"
    return "within seed spread"


def agrees(verdict: str, outcome: str) -> str:
    predicted_worse = verdict in ("degraded", "fail")
    if outcome == "within seed spread":
        return "yes" if not predicted_worse else "no (no gap measured)"
    return ("yes" if predicted_worse else "no") if outcome == "worse OOD" else ("no" if predicted_worse else "yes")


# ---------------------------------------------------------------- tables


def verdict_of(rec: Record) -> tuple[str, str]:
    report = check_paths([rec.path / "spec.seq"])[0]
    deciding = [d for d in report.diagnostics if decides_verdict(d)]
    failed = sorted({d.pillar for d in deciding})
    codes = ", ".join(sorted({d.code for d in deciding}))
    return report.verdict, (f"{'/'.join(failed)} ({codes})" if failed else "none")


def fmt_gap(value: float, spread: float) -> str:
    return f"{value:+.3f}" + ("" if abs(value) > spread else "~")


def by_spec(records: list[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for rec in sorted(records, key=lambda r: (r.spec != BASELINE, r.spec, r.seed)):
        out.setdefault(rec.spec, []).append(rec)
    return out


def verdict_table(limited: list[Record], seeds: list[Record]) -> tuple[list[str], list[tuple]]:
    domains = sorted({d for s in seeds for d in s.curve.domains})
    head = ["spec", "`seqdsl check`", "failed pillars (rules)", "matched train loss", "mean OOD gap",
            "seed spread", *domains, "in-domain gap", "measured", "verdict agrees"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    facts = []
    for spec, runs in by_spec(limited).items():
        if spec == BASELINE:
            continue
        verdict, pillars = verdict_of(runs[0])
        gap = gap_to_baseline(runs, seeds)
        outcome = measured(gap)
        level = f"{gap.level:.3f}" if gap.level is not None else gap.note
        cells = [fmt_gap(gap.gaps[d], gap.spreads[d]) if d in gap.gaps else "n/a" for d in domains]
        ind = gap.gaps.get(IN_DOMAIN)
        name = spec if len(runs) == 1 else f"{spec} ({len(runs)} seeds)"
        lines.append(f"| {name} | {verdict} | {pillars} | {level} | **{gap.ood_gap:+.3f}** | "
                     f"{gap.ood_spread:.3f} | {' | '.join(cells)} | {'n/a' if ind is None else f'{ind:+.3f}'} | "
                     f"{outcome} | {agrees(verdict, outcome)} |")
        facts.append((spec, verdict, outcome, agrees(verdict, outcome), gap))
    return lines, facts


def seeds_table(seeds: list[Record]) -> list[str]:
    domains = sorted({d for s in seeds for d in s.curve.domains})
    lines = ["| run | final train loss | " + " | ".join([IN_DOMAIN + " (held out)", *domains]) + " |",
             "|" + "---|" * (len(domains) + 3)]
    for s in seeds:
        final = s.final_eval
        train = s.final_train_loss
        lines.append(f"| {s.name} | {train:.3f} | " + " | ".join(f"{final[d]:.3f}" for d in [IN_DOMAIN, *domains]) + " |")
    return lines


def seeds_sections(limited: list[Record]) -> list[str]:
    """A table of final evaluations for every spec trained with several seeds."""
    out = []
    for spec, runs in by_spec(limited).items():
        if len(runs) > 1:
            out += [f"### The {len(runs)} seeds of {spec} (final evaluation, nats/token)", "", *seeds_table(runs), ""]
    return out


def concurrent(rec: Record, records: list[Record]) -> int:
    """How many trainings ran on the host at the busiest moment of this one's (itself included),
    from the runs' start and wall times: the runs share the host's CPUs, which slows compilation
    and so the time to first step."""
    def span(r: Record) -> tuple[float, float]:
        a = r.study["attempts"][-1]
        start = datetime.datetime.fromisoformat(a["started"].replace("Z", "+00:00")).timestamp()
        return start, start + a["wall_s"]

    begin, end = span(rec)
    spans = [span(r) for r in records]
    moments = [max(begin, b) for b, _ in spans if b < end]  # where the count can rise
    return max(sum(1 for b, e in spans if b <= t < e) for t in moments)


def length_table(records: list[Record]) -> list[str]:
    lines = ["| run | context | held-out blogs 2K / 4K / 8K | mean OOD 2K / 4K / 8K | 8K vs 4K (mean OOD) |",
             "|---|---|---|---|---|"]
    for rec in records:
        seq = rec.config["seq_len"]
        final = with_ood_mean(rec.final_eval)
        row = {seq: final}
        refused = []
        for length, meta in sorted(rec.study.get("lengths", {}).items(), key=lambda kv: int(kv[0])):
            path = rec.path / f"eval_seq{length}.json"
            if meta["rc"] == 0 and path.exists():
                got = {r["domain"]: r["loss"] for r in json.loads(path.read_text())["records"]}
                row[int(length)] = with_ood_mean(got)
            else:
                refused.append(refusal(rec, int(length)))
        cols = [seq, 2 * seq, 4 * seq]
        ind = " / ".join(f"{row[c][IN_DOMAIN]:.3f}" if c in row else "-" for c in cols)
        ood = " / ".join(f"{row[c]['mean OOD']:.3f}" if c in row else "-" for c in cols)
        delta = (f"{row[4 * seq]['mean OOD'] - row[2 * seq]['mean OOD']:+.3f}"
                 if 4 * seq in row and 2 * seq in row else "; ".join(sorted(set(refused))) or "-")
        lines.append(f"| {rec.name} | {seq} | {ind} | {ood} | {delta} |")
    return lines


def refusal(rec: Record, length: int) -> str:
    """The one-line error `seqdsl eval` gave at this length, from the run's log."""
    log = rec.log.splitlines()
    for i, line in enumerate(log):
        if line.startswith("$ seqdsl eval") and f"--seq-len {length} " in line:
            for after in log[i + 1:]:
                if after.startswith("error:"):
                    return "refused: " + after.removeprefix("error: ").split(":")[-1].strip()
                if after.startswith("$ "):
                    break
    return "failed (see train.log)"


SELF_CHECK_FAILED = re.compile(r"seqdsl: mixer \S+: (\S+) failed its self-check here \((.*)\); running (.*) instead")


def ran_path(rec: Record) -> str:
    """The path the run's layers took: its `paths` event, unless its log shows a fast path's
    self-check failing and the reference running instead. (Runs of the first round logged the
    display plan in that case, not the fallback: seqdsl/lower/lm.py's describe_paths now
    reports the plan the calls took.)"""
    path = rec.events["paths"]["detail"].split("  ", 1)[1].split(" (")[0] if "paths" in rec.events else "?"
    failed = SELF_CHECK_FAILED.search(rec.log)
    if failed and failed.group(3) == "the reference":
        mixer = path.split(":")[0]
        return f"`{mixer}: reference` (`{failed.group(1)}` failed its self-check: {failed.group(2)})"
    return f"`{path}`"


def run_table(records: list[Record]) -> list[str]:
    lines = ["| run | GPU | trainings at once | wall (train) | tokens | tokens/s | MFU | data wait | time to first step "
             "| path (every layer) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for rec in records:
        attempt = rec.study["attempts"][-1]
        late = rec.train[len(rec.train) // 4:]
        tps = statistics.median(r["tokens_per_s"] for r in late)
        mfu = statistics.median(r["mfu"] for r in late if r.get("mfu") is not None)
        step_s = rec.config["batch"] * rec.config["seq_len"] / tps
        wait = statistics.median(r["data_wait_s"] for r in late) / step_s
        path = ran_path(rec)
        lines.append(f"| {rec.name} | {attempt['gpu']} | {concurrent(rec, records)} | {attempt['wall_s']:.0f} s | {rec.train[-1]['tokens']:,} | "
                     f"{tps:,.0f} | {100 * mfu:.1f}% | {100 * wait:.2f}% | "
                     f"{rec.events['first_step']['seconds']:.0f} s | {path} |")
    return lines


# ---------------------------------------------------------------- plot


def plot(records: list[Record], path: Path, trained_on_all: bool = False) -> None:
    """Held-out loss against training loss, a panel per domain, a line per run; `trained_on_all`:
    the mixed setting, whose runs trained on every domain (no panel is out of domain)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains = [IN_DOMAIN, *sorted({d for r in records for d in (*r.curve.domains, *r.curve.in_domain)} - {IN_DOMAIN})]
    fig, axes = plt.subplots(2, (len(domains) + 1) // 2, figsize=(5 * ((len(domains) + 1) // 2), 9))
    specs = sorted({r.spec for r in records}, key=lambda s: (s != BASELINE, s))
    colors = {s: plt.get_cmap("tab20")(i % 20) for i, s in enumerate(specs)}
    for ax, domain in zip(axes.flat, domains):
        for rec in records:
            points = rec.curve.in_domain.get(domain) or rec.curve.domains.get(domain, ())
            ax.plot([p.train_loss for p in points], [p.ood for p in points], marker="o", ms=3,
                    color=colors[rec.spec], lw=2.2 if rec.spec == BASELINE else 1.2,
                    ls="-" if rec.seed == 0 else "--", label=f"{rec.spec} (seed {rec.seed})")
        ax.set_title(f"{domain} (held out{'' if trained_on_all or domain == IN_DOMAIN else ', OOD'})")
        ax.set_xlabel("training loss (nats/token)")
        ax.set_ylabel("held-out loss (nats/token)")
        ax.invert_xaxis()  # training runs left to right
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(domains):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


GAP_PLOT = REPO / "docs" / "results" / "verdict_vs_gap.png"
VERDICT_COLORS = {"pass": "tab:green", "degraded": "tab:orange", "fail": "tab:red"}


def gap_plot(facts: list[tuple], path: Path, span: float = 0.3) -> None:
    """One row per spec: its mean OOD gap (dot, coloured by its verdict) and the seed spread
    around zero (grey bar): a dot outside the bar is a gap; hollow dots are compared at equal
    steps (no matched training loss). Gaps past +-span are drawn at the edge with their value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(facts, key=lambda f: f[4].ood_gap)
    fig, ax = plt.subplots(figsize=(8.5, 0.42 * len(rows) + 1.6))
    for y, (_, verdict, _, agree, gap) in enumerate(rows):
        ax.barh(y, 2 * gap.ood_spread, left=-gap.ood_spread, height=0.6, color="0.85", zorder=1)
        x = max(-span, min(span, gap.ood_gap))
        matched = gap.level is not None
        ax.scatter([x], [y], s=60, zorder=3, color=VERDICT_COLORS[verdict] if matched else "white",
                   edgecolors=VERDICT_COLORS[verdict], linewidths=1.8)
        if x != gap.ood_gap:
            ax.annotate(f"{gap.ood_gap:+.2f}", (x, y), xytext=(-6 if x > 0 else 6, 0), textcoords="offset points",
                        ha="right" if x > 0 else "left", va="center", fontsize=8)
        if agree != "yes":
            ax.annotate("disagrees", (span, y), xytext=(4, 0), textcoords="offset points", va="center",
                        fontsize=8, color="0.35", annotation_clip=False)
    ax.axvline(0, color="0.4", lw=0.8)
    ax.set_yticks(range(len(rows)), [f[0] for f in rows])
    ax.set_xlim(-span, span)
    ax.set_xlabel("mean OOD loss minus Transformer++'s at matched training loss (nats/token)")
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=f"`seqdsl check`: {v}")
               for v, c in VERDICT_COLORS.items()]
    handles += [plt.Line2D([], [], marker="o", ls="", markerfacecolor="white", markeredgecolor="0.3",
                           label="no matched loss: equal steps"),
                plt.Rectangle((0, 0), 1, 1, color="0.85", label="seed spread")]
    ax.grid(axis="x", alpha=0.3)
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.9 / (0.42 * len(rows) + 1.6), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def verdict_facts(records: list[Record]) -> tuple[list[str], list[tuple]]:
    """The verdict table and its facts (spec, verdict, measured, agrees, gap) of the
    limited-domain runs."""
    limited = [r for r in records if r.setting == "limited"]
    seeds = [r for r in limited if r.spec == BASELINE]
    if not seeds:
        raise SystemExit("error: no limited-domain Transformer++ run: nothing to measure gaps against")
    return verdict_table(sorted(limited, key=lambda r: (r.spec, r.seed)), seeds)


def mixing_effect(limited: Gap, mixed: Gap) -> str:
    """What mixing did to a spec's gap, judged against the limited setting's seed spread."""
    spread = limited.ood_spread
    was, now = abs(limited.ood_gap) > spread, abs(mixed.ood_gap) > spread
    if was and not now:
        return "the gap closed: within the spread when mixed"
    if now:
        return ("a gap in both settings" if was else "a gap only when mixed") + \
            (", smaller when mixed" if abs(mixed.ood_gap) < abs(limited.ood_gap) else ", not smaller when mixed")
    return "no gap in either setting"


def mixed_section(records: list[Record], facts: list[tuple]) -> list[str]:
    """The mixed-domain setting against the limited one: each spec's gap to Transformer++ over the
    same domains, trained without them (limited) and with them (mixed)."""
    mixed = [r for r in records if r.setting == "mixed"]
    if not mixed:
        return []
    head = ["## The mixed-domain setting", ""]
    base = [r for r in mixed if r.spec == BASELINE]
    if not base:
        return [*head, f"No mixed-domain {BASELINE} run has records yet: nothing to compare the mixed runs with."]
    limited = {f[0]: f[4] for f in facts}
    domains = sorted({*base[0].curve.domains, *base[0].curve.in_domain} - {IN_DOMAIN})
    lines = [*head,
             f"The same specs trained on every domain's training text ({', '.join(base[0].config['train_domains'])}, "
             "interleaved in their natural proportions), with everything else as in the limited setting; held-out "
             f"text identical. Gap = the spec minus {', '.join(b.name for b in base)} at a matched training loss "
             "(on the mix), on the domains that were out of domain in the limited setting; their mean is the "
             "`mean gap` column. With one mixed seed of each, the spread is the limited setting's (its seeds' "
             "range): the paper's claim under test is that mixing hides the gaps the limited setting shows.",
             "",
             "| spec | limited: mean OOD gap (spread) | mixed: matched train loss | mixed: mean gap | "
             + " | ".join(domains) + " | what mixing did |",
             "|" + "---|" * (len(domains) + 5)]
    effects: dict[str, list[str]] = {}
    for spec, runs in by_spec(mixed).items():
        if spec == BASELINE:
            continue
        gap = gap_to_baseline(runs, base)
        was = limited.get(spec)
        level = f"{gap.level:.3f}" if gap.level is not None else gap.note
        cells = [f"{gap.gaps[d]:+.3f}" if d in gap.gaps else "n/a" for d in domains]
        before = f"{was.ood_gap:+.3f} ({was.ood_spread:.3f})" if was else "no limited run"
        effect = mixing_effect(was, gap) if was else "n/a"
        effects.setdefault(effect, []).append(spec)
        lines.append(f"| {spec} | {before} | {level} | **{gap.ood_gap:+.3f}** | {' | '.join(cells)} | {effect} |")
    return [*lines, "", *mixing_statement(effects), "",
            f"![mixed setting: held-out loss against training loss]({MIXED_PLOT.relative_to(PAGE.parent).as_posix()})"]


def mixing_statement(effects: dict[str, list[str]]) -> list[str]:
    """What the mixed setting can say, in words: the claim needs a limited-setting gap to hide."""
    hidden = effects.get("the gap closed: within the spread when mixed", [])
    neither = effects.get("no gap in either setting", [])
    lines = []
    if hidden:
        lines.append(f"Mixing hid the limited setting's gap for {', '.join(hidden)}, as the paper claims.")
    if neither:
        lines.append(f"{', '.join(neither)} had no OOD gap beyond the seed spread in the limited setting, so "
                     "for them this scale cannot test whether mixing hides one; mixing did not open one either.")
    for effect, specs in effects.items():
        if effect.startswith("a gap"):
            lines.append(f"{', '.join(specs)}: {effect}, against the paper's claim that mixing hides gaps.")
    return lines


# ---------------------------------------------------------------- the page

# What arXiv 2505.18522 reports for each spec at matched training loss (docs/design.md §2).
PAPER = {
    "top1_element": "matches", "top1_chunk_exact": "matches", "top1_chunk_approx": "matches at 2K",
    "temperature_0_5": "matches or better", "temperature_4": "worse", "random_keys": "much worse",
    "window_256": "worse", "linear_attention": "worse", "mamba2": "worse", "mamba2_no_conv": "worse",
    "rwkv7": "worse", "gated_deltanet": "worse",
}


def summary_lines(records: list[Record]) -> list[str]:
    first = records[0].config
    walls = [a["wall_s"] for r in records for a in r.study["attempts"]]
    evals = [m["wall_s"] for r in records for m in r.study.get("lengths", {}).values()]
    gpus = sorted({a["gpu"] for r in records for a in r.study["attempts"]})
    dates = sorted({a["started"][:10] for r in records for a in r.study["attempts"]})
    ood = ", ".join(first["ood_domains"])
    return [
        f"- **Runs with records**: {len(records)} ({', '.join(r.name for r in records)}).",
        f"- **Model and training** (every run the same but the spec and the seed): preset `{first['preset']}`, "
        f"{first['steps']} steps of {first['batch']} x {first['seq_len']} tokens "
        f"({first['micro_batch']} x {first['accumulation']} accumulation) = {first['steps'] * first['batch'] * first['seq_len']:,} "
        f"tokens, peak lr {first['lr']:g} after {first['warmup']} warmup steps, cosine to {first['min_lr_ratio']:g} x, "
        f"AdamW ({first['beta1']}, {first['beta2']}), weight decay {first['weight_decay']}, clip {first['clip']}, "
        f"{first['dtype']}, compile + CUDA graphs: `{first['compile']}` / `{first['cuda_graphs']}`.",
        f"- **Data**: trained on `{', '.join(first['train_domains'])}` (the Blog Authorship Corpus's train "
        f"shards), tokenizer GPT-NeoX-20B (vocabulary {first['vocab']:,}); evaluated in-domain on held-out blogs "
        f"and out of domain on {ood}; held-out units: {100 * first['data']['heldout']:g}% of every domain's "
        f"8K-character units by hash, at most {first['data']['eval_tokens']:,} tokens per domain, "
        f"every {first['eval_every']} steps.",
        f"- **Device**: {', '.join(gpus)}, one training per GPU, up to {max(concurrent(r, records) for r in records)} "
        f"at once on one host, sharing its CPUs (the runs table says how many beside each run); torch "
        f"{first['torch_version']}; dates {', '.join(dates)}.",
        f"- **GPU time**: {sum(walls) / 60:.1f} GPU-minutes of training (start-up and evaluation included) and "
        f"{sum(evals) / 60:.1f} of length evaluation, for the runs with records.",
    ]


def statement(facts: list[tuple]) -> list[str]:
    agree = [f[0] for f in facts if f[3] == "yes"]
    disagree = [(f[0], f[1], f[2]) for f in facts if f[3] != "yes"]
    out = [f"The verdict and the measurement agree for {len(agree)} of {len(facts)} specs"
           + (f" ({', '.join(agree)})" if agree else "") + "."]
    for spec, verdict, outcome in disagree:
        out.append(f"- **{spec}**: `seqdsl check` says {verdict}, measured {outcome}; the paper reports "
                   f"{PAPER.get(spec, 'no result')}.")
    unmatched = [f[0] for f in facts if f[4].level is None]
    if unmatched:
        out.append(f"- No matched training loss for {', '.join(unmatched)}: the comparison there is at equal "
                   "steps, which credits a faster learner; read it as such.")
    return out


def not_run(records: list[Record]) -> list[str]:
    done = {r.name for r in records}
    missing = [run.name for run in STUDY if run.name not in done]
    return [f"Not run yet ({len(missing)} of the study's {len(STUDY)} runs): " + ", ".join(f"`{m}`" for m in missing) + "."] if missing else []


def page(records: list[Record], verdicts: tuple[list[str], list[tuple]] | None = None) -> str:
    """The page; `verdicts` is `verdict_facts(records)` when the caller has it already."""
    limited = [r for r in records if r.setting == "limited"]
    seeds = [r for r in limited if r.spec == BASELINE]
    table, facts = verdicts or verdict_facts(records)
    first = records[0].config
    command = records[0].study["attempts"][-1]["command"]
    out = [
        "# The paper's experiment, run with seqdsl",
        "",
        "<!-- generated by experiments/report.py from docs/results/runs/; edit the script, not this page -->",
        "",
        "arXiv 2505.18522's comparison, with seqdsl's own commands on real data: every spec of `specs/` named below "
        "is trained on one domain (web blogs) and evaluated out of domain, and its held-out loss is compared with "
        "Transformer++'s **at the same training loss** (docs/design.md §2). Each `seqdsl check` verdict is then "
        "held against the gap measured.",
        "",
        "## Set-up",
        "",
        *summary_lines(records),
        "",
        "Rerun with `experiments/study.py` (the runs, their order and the commands; `plan` prints them), on a GPU "
        "machine of the device tool with `experiments/study_gpu.sh`, then `experiments/study.py collect` and "
        "`experiments/report.py`. The code domain is built by `experiments/build_code_domain.py` from the Python "
        "standard library's sources, pinned file by file in `experiments/code_domain.manifest.json`. One run's "
        "exact command, as it ran:",
        "",
        "```",
        command,
        "```",
        "",
        *not_run(records),
        "",
        "## Verdicts against measured OOD gaps",
        "",
        f"Gap = the spec's held-out loss minus the mean of the {len(seeds)} Transformer++ seeds' "
        f"({', '.join(s.name for s in seeds)}), in nats/token, at the matched training loss (experiments/report.py "
        "says how it is chosen); seed spread = the range of the Transformer++ seeds' mean OOD loss there (a spec "
        "with several seeds is compared by its seeds' mean, and the larger of the two ranges is its spread). A "
        "domain's gap ends in `~` when it is within that domain's seed spread. `measured`: worse OOD / better OOD "
        "when the mean OOD gap exceeds the spread, else within seed spread. `verdict agrees`: a pass verdict "
        "predicts no worse OOD loss, degraded or fail predicts a worse one.",
        "",
        *table,
        "",
        *statement(facts),
        "",
        f"![verdicts against measured gaps]({GAP_PLOT.relative_to(PAGE.parent).as_posix()})",
        "",
        *seeds_sections(limited),
        "",
        *mixed_section(records, facts),
        "",
        "## Held-out loss against training loss",
        "",
        f"The limited setting. One panel per domain; each line is a run's evaluations (every {records[0].config['eval_every']} steps), "
        f"placed at its training loss then (the mean of the {DEFAULT_WINDOW} train records before). At the same x, lower is "
        "better; a spec that generalises like Transformer++ lies on its line.",
        "",
        f"![held-out loss against training loss]({PLOT.relative_to(PAGE.parent).as_posix()})",
        "",
        "## Length: evaluation at 2x and 4x the training context",
        "",
        "`seqdsl eval RUN --seq-len L --max-tokens 131072` on the final checkpoint (held-out blogs and the mean of "
        "the OOD domains, nats/token). The 2K column is the run's own final evaluation, on up to "
        f"{records[0].config['data']['eval_tokens']:,} tokens per domain, so it is not the same text as the 4K and 8K "
        f"columns ({LENGTH_EVAL_TOKENS:,} tokens each); compare 4K with 8K.",
        "",
        *length_table(records),
        "",
        "## The runs",
        "",
        "tokens/s, MFU (against the GPU's data-sheet dense bf16 peak, seqdsl/ir/flops.py) and data wait (share of a step spent waiting for the "
        "next batch) are medians over the steps after the first quarter, from `metrics.jsonl`; wall is the "
        "training command's, start to exit; time to first step is its `first_step` event; the path is its "
        "`paths` event.",
        "",
        *run_table(records),
        "",
        "## Rerunning",
        "",
        "The study is resumable: `experiments/study.py run` skips every run whose records are in "
        "`docs/results/runs/`, so a later session runs only what is missing, in the study's order. With the "
        "device tool (calls of at most 10 minutes carrying at most 64 MiB):",
        "",
        "```",
        "bash experiments/stage_data.sh CORPUS           # .study/a and .study/b: the data in two parts, the code domain",
        "# on the GPU machine, call after call (the study runs in the background between them):",
        "bash experiments/study_gpu.sh stage             # carry .study/a, .whl (the wheels docs/training.md names), .sdist",
        "bash experiments/study_gpu.sh start 4 13        # carry .study/b; 4 GPUs; start no run after 13 minutes",
        "bash experiments/study_gpu.sh poll 560          # repeat; each call returns study_records.tar.gz",
        "# here: unpack the last tarball's records/ into docs/results/runs/, then",
        "python experiments/report.py",
        "```",
        "",
        "`.sdist/` holds mamba-ssm's sdist (docs/mamba.md says how to fetch it): the stage call builds it for the "
        "GPU in the background, so Mamba-2 runs on mamba-ssm's SSD kernels; without it, on the chunked reference.",
        "",
        "On any machine with GPUs and the corpus on disk, `python experiments/study.py run --data DATA --runs RUNS "
        "--gpus N` does the same in one command, and `python experiments/study.py collect --runs RUNS` copies the "
        "records in.",
        "",
        "## What this scale can and cannot show",
        "",
        f"- {first['steps'] * first['batch'] * first['seq_len'] / 1e6:.0f}M training tokens leave a "
        f"{first['preset']} model far from converged (training loss "
        f"{min(rec.final_train_loss for rec in records):.2f}-"
        f"{max(rec.final_train_loss for rec in records):.2f} nats/token here). At "
        "that stage a language model predicts mostly from the last few hundred tokens, so a mixer that cannot "
        "select far back (a 256-token window) loses little, and the paper's differences, measured after far more "
        "training, may not have opened yet. A gap that is absent here is therefore weak evidence against the "
        "paper; a gap that is present and beyond the seed spread is evidence for it at this scale.",
        f"- The seed spread comes from {len(seeds)} Transformer++ seeds"
        + "".join(f" and {len(runs)} {spec} seeds" for spec, runs in by_spec(limited).items()
                  if spec != BASELINE and len(runs) > 1)
        + "; with so few, it underestimates the noise.",
        "- Matching training loss compares a slower learner late in its run (more tokens seen, a lower learning "
        f"rate on the cosine) with Transformer++ early in its run. With evaluations {first['eval_every']} steps apart the matched "
        "values are interpolated over stretches where the loss still falls fast. Both can move a gap by more "
        "than the seed spread here; longer runs with more evaluations would shrink both effects.",
        "- Out-of-domain sets of a few hundred thousand tokens (books and StackExchange have less held-out text "
        "than the budget) are noisy per domain; the mean over the OOD domains is steadier.",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--check", action="store_true", help="compare docs/results.md with what the records give")
    args = parser.parse_args(argv)
    records = sorted((load(p) for p in args.runs.iterdir() if (p / "metrics.jsonl").exists()),
                     key=lambda r: [run.name for run in STUDY].index(r.name) if r.name in {s.name for s in STUDY} else 99)
    verdicts = verdict_facts(records)
    text = page(records, verdicts)
    if args.check:
        same = PAGE.exists() and PAGE.read_text() == text
        print("docs/results.md is up to date" if same else "docs/results.md differs from the records: run experiments/report.py")
        return 0 if same else 1
    PAGE.write_text(text)
    plot([r for r in records if r.setting == "limited"], PLOT)
    mixed = [r for r in records if r.setting == "mixed"]
    if mixed:
        plot(mixed, MIXED_PLOT, trained_on_all=True)
    gap_plot(verdicts[1], GAP_PLOT)
    plots = [PLOT, GAP_PLOT] + ([MIXED_PLOT] if mixed else [])
    print(f"wrote {PAGE.relative_to(REPO)} and {', '.join(str(p.relative_to(REPO)) for p in plots)} "
          f"from {len(records)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
