"""Run the rules over a program and turn diagnostics into verdicts.

Verdicts (docs/design.md §5):
- mixer: `fail` if any error of pillar V/R/N/W; `degraded` if any warning of pillar V/R/N
  (well-formedness warnings and infos do not degrade); else `pass`.
- model: the worst verdict of its mixers, except a hybrid (M001 reported) whose mixers mix
  `pass` and non-`pass`: `degraded`, since the paper tested neither way; an M error
  (a model that cannot be built) makes it `fail`.
- spec (a file): when the file declares models, the worst over its models and over its own
  mixers that none of its models uses (a mixer inside a model is judged through the model, so a
  hybrid's file is as degraded as the hybrid); without models, the worst over its own mixers.
  A file that declares nothing itself is judged on what it imports (as `seqdsl lower` builds
  an imported mixer); a file with no mixer and no model at all is an input error (exit 2).
Rules left out by `--select/--ignore` neither report nor count for any verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

# Importing the rule families registers their rules, in pillar order V, R, N, W, M.
from seqdsl.check import visibility, relation, distribution, wellformed  # noqa: F401  # isort: skip
from seqdsl.check import model as _model_rules  # noqa: F401
from seqdsl.check.registry import (PAPER_CONTEXT, Diagnostic, MixerContext, ModelContext, Rule,
                                   active_rules, ordered)
from seqdsl.errors import SeqError
from seqdsl.ir import nodes
from seqdsl.ir.presets import NOTHING_DECLARED
from seqdsl.passes.resolve import Loaded, load

VERDICTS = ("pass", "degraded", "fail")  # from best to worst; a spec that cannot be read: "error"


def worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=VERDICTS.index, default="pass")


def decides_verdict(d: Diagnostic) -> bool:
    """Whether a finding moves a mixer's verdict: an error of pillar V/R/N/W, a warning of V/R/N
    (a backend warning, W, is about speed, not the principle)."""
    return (d.severity == "error" and d.pillar in "VRNW") or (d.severity == "warning" and d.pillar in "VRN")


def mixer_verdict(diagnostics: Iterable[Diagnostic]) -> str:
    deciding = [d for d in diagnostics if decides_verdict(d)]
    if any(d.severity == "error" for d in deciding):
        return "fail"
    return "degraded" if deciding else "pass"


@dataclass
class SpecReport:
    """The result of checking one file. `error` is set (and `verdict` is "error") when the file
    could not be read, parsed or resolved."""

    path: str
    verdict: str
    mixers: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: SeqError | None = None



def _context_of(models: Sequence[nodes.Model], override: int | None) -> tuple[int, str]:
    if override is not None:
        return override, "--context"
    if models:
        shortest = min(models, key=lambda m: m.context)
        return shortest.context, f"model {shortest.name}"
    return PAPER_CONTEXT, "the paper's; no model uses this mixer"


def _run(rule: Rule, ctx) -> list[Diagnostic]:
    return [
        Diagnostic(rule.code, rule.name, rule.pillar, f.severity or rule.severity, f.message,
                   f.span, f.why, f.fix, ctx.name)
        for f in rule.func(ctx)
    ]


def check_program(loaded: Loaded, select: Iterable[str] | None = None,
                  ignore: Iterable[str] | None = None, context: int | None = None) -> SpecReport:
    """Check a loaded spec: its own mixers, the (possibly imported) mixers its own models use,
    and its own models."""
    rules = active_rules(select, ignore)
    program = loaded.program
    if not program.mixers and not program.models:
        raise SeqError(NOTHING_DECLARED, None,
                       "declare a `mixer NAME { ... }` (and a `model`), or import a spec")
    # A file that only imports is judged on what it imports, as `seqdsl lower` builds it.
    own = set(program.own) or {m.name for m in program.mixers} | {m.name for m in program.models}
    own_models = [m for m in program.models if m.name in own]
    used = {name for m in own_models for name in m.mixer}
    mixers = [m for m in program.mixers if m.name in own or m.name in used]

    report = SpecReport(path=loaded.path, verdict="pass")
    for mixer in mixers:
        users = tuple(m for m in program.models if mixer.name in m.mixer)
        length, source = _context_of(users, context)
        ctx = MixerContext(mixer, program, loaded.sources, length, source, users)
        found = [d for r in rules if r.scope == "mixer" for d in _run(r, ctx)]
        report.mixers[mixer.name] = mixer_verdict(found)
        report.diagnostics.extend(found)
    for model in own_models:
        verdicts = {name: report.mixers[name] for name in model.mixer}
        model_ctx = ModelContext(model, program, loaded.sources, verdicts)
        found = [d for r in rules if r.scope == "model" for d in _run(r, model_ctx)]
        report.models[model.name] = model_verdict(verdicts.values(), found)
        report.diagnostics.extend(found)
    report.diagnostics.sort(key=_sort_key(loaded.path))
    report.verdict = file_verdict(report, own, used)
    return report


def file_verdict(report: SpecReport, own: set[str], used: set[str]) -> str:
    """Models first: a mixer used by the file's models is judged through them (a hybrid of a
    passing and a failing mixer is degraded, whether it declares its mixers or imports them);
    own mixers no model uses still count on their own."""
    loose = [v for n, v in report.mixers.items() if n in own and n not in used]
    return worst(list(report.models.values()) + loose)


def _sort_key(path: str):
    """This file's findings first, in text order; then those located in imported files."""
    order = {r.code: i for i, r in enumerate(ordered())}

    def key(d: Diagnostic):
        s = d.span
        where = (s.file != path, s.file, s.line, s.column) if s else (True, "", 0, 0)
        return where, order[d.code], d.subject

    return key


def model_verdict(mixer_verdicts: Iterable[str], found: Iterable[Diagnostic]) -> str:
    verdicts = set(mixer_verdicts)
    found = list(found)
    if any(d.severity == "error" for d in found):
        return "fail"
    hybrid = any(d.code == "M001" for d in found)
    if hybrid and "pass" in verdicts and len(verdicts) > 1:
        return "degraded"
    return worst(verdicts)


def expand_paths(paths: Iterable[str | Path]) -> list[tuple[Path, SeqError | None]]:
    """Files as given; directories become their *.seq files (recursively, sorted). An empty
    directory comes back with an error, not as silence."""
    out: list[tuple[Path, SeqError | None]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(path.rglob("*.seq"))
            out.extend((f, None) for f in found)
            if not found:
                out.append((path, SeqError(f"{path} holds no .seq files")))
        else:
            out.append((path, None))
    return out


def check_paths(paths: Iterable[str | Path], select: Iterable[str] | None = None,
                ignore: Iterable[str] | None = None, context: int | None = None) -> list[SpecReport]:
    """Check every file; a file that cannot be read becomes a report with verdict "error" and
    the others are still checked. Selectors are validated once, before any file."""
    active_rules(select, ignore)
    reports = []
    for path, error in expand_paths(paths):
        if error is None:
            try:
                reports.append(check_program(load(path), select, ignore, context))
                continue
            except SeqError as err:
                error = err
        reports.append(SpecReport(path=str(path), verdict="error", error=error))
    return reports
