"""A spec's model for a probe: the spec's mixer at a small preset, with the task's vocabulary
and the task's longest training length as its context.

The preset resizes the model as `seqdsl train` does (seqdsl/ir/presets.py): heads with the width,
windows and chunks with the context (so `window(256)` written for 2048 tokens is a window of an
eighth of the probe's context, the same reach relative to the sequence) unless `keep_absolute`.
The checker's verdict of the model as written and as probed are kept beside the results: the
probe measures the second, and the two differ when a resize covers a whole probe context.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from seqdsl.ir import nodes
from seqdsl.ir.printer import format_program


@dataclass(frozen=True)
class ProbeModel:
    spec: str  # the spec file as given
    program: nodes.Program  # the mixers the model uses, and the model
    model: nodes.Model  # at the preset, with the task's vocab and context
    notes: tuple[str, ...]  # what the resize could not keep, in words
    verdict: str  # the checker's verdict of the model as written, with its codes
    verdict_probed: str  # ... and of the model built here

    @property
    def digest(self) -> str:
        """Names the model built (its resolved spec text), for resuming."""
        return hashlib.sha256(format_program(self.program).encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        return Path(self.spec).stem


def probe_model(spec: str, *, vocab: int, context: int, preset: str = "tiny", model: str | None = None,
                keep_absolute: bool = False) -> ProbeModel:
    """The model of `spec` (its last model, or `model`) at `preset`, `context` tokens and `vocab`
    ids. Bad specs and impossible presets raise the SeqError that loading or resizing gives."""
    from seqdsl.check.resized import model_verdict
    from seqdsl.ir.presets import model_at
    from seqdsl.passes.resolve import load

    written = load(spec).program
    resized = model_at(written, model, preset, context=context, keep_absolute=keep_absolute)
    built = resized.model.model_copy(update={"vocab": vocab, "context": context})
    used = tuple(dict.fromkeys(built.mixer))
    program = nodes.Program(mixers=tuple(resized.program.mixer(m) for m in used), models=(built,),
                            own=used + (built.name,))
    source = resized.source or resized.model
    before = model_verdict(nodes.Program(mixers=written.mixers, models=(source,), own=(source.name,)), source)
    after = model_verdict(program, built)
    return ProbeModel(spec, program, built, tuple(resized.not_kept), _verdict_text(before), _verdict_text(after))


def _verdict_text(v) -> str:
    return v.verdict + (f" ({', '.join(v.codes)})" if v.codes else "")


def build(pm: ProbeModel, seed: int):
    """The LanguageModel of `pm`, its weights drawn from `seed`."""
    import torch

    from seqdsl.lower.lm import LanguageModel

    torch.manual_seed(seed)
    return LanguageModel(pm.program, pm.model)
