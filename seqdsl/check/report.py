"""Rendering check results: text for people (ruff/mypy-like), one JSON document for tools.

Text, per diagnostic:

    specs/window_256.seq:8:25: V001 [V error] finite-window: window(256) lets a token see ...
       8 |     visibility = window(256)
                                   ^^^
      why: full-sequence visibility: any earlier token must be reachable in one mixing step
      fix: `visibility = full`, or a window of at least 2048 tokens

then a verdict block per file and a one-line summary. `--format summary` prints one line per
file instead (`specs/window_256.seq: fail (V001)`), then the same summary. The bracket holds the pillar and the
severity. When a finding's span lies in another file (an inherited slot, an imported mixer) an
`in:` line names the mixer or model the finding is about.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Iterable

from seqdsl.check.engine import SpecReport
from seqdsl.check.registry import Diagnostic, ordered
from seqdsl.errors import render_snippet

JSON_VERSION = 1


def exit_code(reports: Iterable[SpecReport]) -> int:
    """2 if any spec could not be read; else 1 if any spec is degraded or fails; else 0.

    The exit code follows the verdicts, which follow severity and pillar: a finding against the
    principle (a V, R or N error or warning, a W error, an M error or a hybrid) degrades or
    fails a spec. Speed notes (W002, W003: a fast backend falls back to the reference path),
    W004/W005 and infos are printed but leave a passing spec at exit 0."""
    reports = list(reports)
    if any(r.error for r in reports):
        return 2
    return 1 if any(r.verdict in ("degraded", "fail") for r in reports) else 0


# --- text ----------------------------------------------------------------------------------------


def display_path(path: str) -> str:
    """Imported files are resolved to absolute paths; show them relative to the working
    directory when they lie under it, as the paths the user typed are."""
    if os.path.isabs(path):
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            return rel
    return path


def format_diagnostic(d: Diagnostic, spec_path: str) -> str:
    s = d.span
    shown = (s.file if s.file == spec_path else display_path(s.file)) if s else spec_path
    where = f"{shown}:{s.line}:{s.column}: " if s else f"{spec_path}: "
    lines = [f"{where}{d.code} [{d.pillar} {d.severity}] {d.name}: {d.message}"]
    if d.span:
        snippet = render_snippet(d.span)
        if snippet:
            lines.append(snippet)
    if d.span is None or d.span.file != spec_path:
        lines.append(f"  in: {d.subject}")
    lines.append(f"  why: {d.why}")
    lines.append(f"  fix: {d.fix}")
    return "\n".join(lines)


def format_verdicts(report: SpecReport) -> str:
    lines = [f"{report.path}: {report.verdict}"]
    order = [r.code for r in ordered()]
    codes: dict[str, set[str]] = {}
    for d in report.diagnostics:
        if d.severity != "info":
            codes.setdefault(d.subject, set()).add(d.code)
    for kind, table in (("mixer", report.mixers), ("model", report.models)):
        for name, verdict in table.items():
            listed = sorted(codes.get(name, ()), key=order.index)
            because = f" ({', '.join(listed)})" if listed else ""
            lines.append(f"  {kind} {name}: {verdict}{because}")
    return "\n".join(lines)


def summary(reports: Iterable[SpecReport]) -> dict[str, Any]:
    reports = list(reports)
    verdicts = Counter(r.verdict for r in reports)
    severities = Counter(d.severity for r in reports for d in r.diagnostics)
    return {
        "specs": len(reports),
        "verdicts": {v: verdicts.get(v, 0) for v in ("pass", "degraded", "fail", "error")},
        "diagnostics": {s: severities.get(s, 0) for s in ("error", "warning", "info")},
        "exit_code": exit_code(reports),
    }


def format_summary(reports: Iterable[SpecReport]) -> str:
    s = summary(reports)
    v, d = s["verdicts"], s["diagnostics"]
    specs = _plural(s["specs"], "spec")
    unreadable = f", {v['error']} unreadable" if v["error"] else ""
    counts = ", ".join(_plural(d[s], s) for s in ("error", "warning", "info"))
    return (f"checked {specs}: {v['pass']} pass, {v['degraded']} degraded, {v['fail']} fail"
            f"{unreadable}; {counts}")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def spec_codes(report: SpecReport) -> list[str]:
    """The codes of a spec's findings that are not infos, in rule order."""
    order = [r.code for r in ordered()]
    return sorted({d.code for d in report.diagnostics if d.severity != "info"}, key=order.index)


def format_spec_line(report: SpecReport) -> str:
    """`specs/window_256.seq: fail (V001)`: a spec in one line (`--format summary`); an
    unreadable one says so (its error goes to stderr, as in the text form)."""
    if report.error:
        return f"{report.path}: unreadable"
    codes = spec_codes(report)
    return f"{report.path}: {report.verdict}" + (f" ({', '.join(codes)})" if codes else "")


def format_text(reports: Iterable[SpecReport]) -> str:
    """Diagnostics and verdicts of the readable specs. Unreadable specs are rendered by
    `format_error` (the CLI prints those on stderr)."""
    blocks: list[str] = []
    for report in reports:
        if report.error:
            continue
        blocks.extend(format_diagnostic(d, report.path) for d in report.diagnostics)
        blocks.append(format_verdicts(report))
    return "\n\n".join(blocks)


def format_error(report: SpecReport) -> str:
    assert report.error is not None, "format_error renders an unreadable spec's error"
    text = report.error.render()
    # A file-level error without a span (a missing file) must still name the file.
    return text if report.error.span or report.path in text else f"{report.path}: {text}"


# --- JSON ----------------------------------------------------------------------------------------


def _diagnostic_json(d: Diagnostic) -> dict[str, Any]:
    s = d.span
    return {
        "code": d.code, "name": d.name, "pillar": d.pillar, "severity": d.severity,
        "file": s.file if s else None,
        "line": s.line if s else None, "column": s.column if s else None,
        "end_line": s.end_line if s else None, "end_column": s.end_column if s else None,
        "message": d.message, "why": d.why, "fix": d.fix, "subject": d.subject,
    }


def _spec_json(r: SpecReport) -> dict[str, Any]:
    out: dict[str, Any] = {
        "path": r.path, "verdict": r.verdict, "mixers": dict(r.mixers), "models": dict(r.models),
        "diagnostics": [_diagnostic_json(d) for d in r.diagnostics],
    }
    if r.error:
        s = r.error.span
        out["error"] = {
            "message": r.error.message, "hint": r.error.hint, "file": s.file if s else r.path,
            "line": s.line if s else None, "column": s.column if s else None,
        }
    return out


def to_json(reports: Iterable[SpecReport]) -> dict[str, Any]:
    """One document for the whole run."""
    reports = list(reports)
    return {"version": JSON_VERSION, "specs": [_spec_json(r) for r in reports],
            "summary": summary(reports)}
