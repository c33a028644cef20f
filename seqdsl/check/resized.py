"""The verdict of a resized model, beside the verdict of the model as written.

A preset (seqdsl/ir/presets.py) changes sizes: the width, the layers, the context, and with the
context the windows and chunks. Whatever it keeps or cannot keep, the resized model is checked
again here, so that `seqdsl lower --preset` and `seqdsl train` print what they actually build
and its verdict, and say when the verdict is not the one the spec was written for (a window
that covers a shorter context passes V001 where the spec fails it).

This module imports neither torch nor triton.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqdsl.check.engine import check_program
from seqdsl.check.registry import ordered
from seqdsl.ir import nodes
from seqdsl.ir.presets import Resized
from seqdsl.passes.resolve import Loaded
from seqdsl.passes.sourcemap import SourceMap


@dataclass(frozen=True)
class ModelVerdict:
    model: str
    verdict: str  # pass / degraded / fail
    codes: tuple[str, ...]  # the findings behind it (no infos), in rule order

    def __str__(self) -> str:
        because = f" ({', '.join(self.codes)})" if self.codes else ""
        return f"{self.model}: {self.verdict}{because}"


def model_verdict(program: nodes.Program, model: nodes.Model) -> ModelVerdict:
    """`model`'s verdict with the mixers of `program` it uses (no source text: no spans)."""
    used = tuple(dict.fromkeys(model.mixer))
    alone = nodes.Program(mixers=tuple(program.mixer(name) for name in used), models=(model,),
                          own=(model.name,))
    report = check_program(Loaded(alone, SourceMap(), nodes.Module(), f"<{model.name}>"))
    order = [r.code for r in ordered()]
    codes = sorted({d.code for d in report.diagnostics if d.severity != "info"}, key=order.index)
    return ModelVerdict(model.name, report.models[model.name], tuple(codes))


def resize_report(written: nodes.Program, resized: Resized, built: nodes.Model | None = None) -> list[str]:
    """What `seqdsl lower` and `seqdsl train` print about a resize: each change, each thing
    not kept, and the verdict of the model built (`built`, default `resized.model`; training
    also sets the vocabulary and context) beside the verdict as written. Nothing when nothing
    was resized."""
    built = built or resized.model
    source = resized.source or built
    if built == source:
        return []
    label = f"preset {resized.preset}" if resized.preset else "as trained"
    lines = [f"{label}: {note}" for note in resized.notes]
    lines += [f"{label}, not kept: {note}" for note in resized.not_kept]
    program = nodes.Program(mixers=written.mixers, models=(source,), own=(source.name,))
    before, after = model_verdict(program, source), model_verdict(resized.program, built)
    changed = "" if before.verdict == after.verdict else (
        f" -- the resize changed the verdict from {before.verdict} to {after.verdict}")
    lines.append(f"check at {label}: {after}; as written: {before}{changed}")
    return lines
