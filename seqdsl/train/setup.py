"""The model a run config trains: the spec resized to the preset, at the tokenizer's vocabulary and
the run's context. (The data a config resolves to is seqdsl/run/data.py's.)"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pydantic

from seqdsl.errors import SeqError
from seqdsl.ir import nodes
from seqdsl.ir.printer import format_program
from seqdsl.run.config import RunConfig


@dataclass(frozen=True)
class ResolvedModel:
    program: nodes.Program  # the mixers used and the trained model only
    spec: nodes.Model  # resized to the preset, vocab = the tokenizer's, context = seq_len
    text: str  # the resolved spec (`seqdsl fmt --resolved` form): what spec.seq holds
    # what the resize changed and could not keep, and the trained model's verdict beside the
    # spec's (seqdsl.check.resized), for the run's first messages
    report: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def resolve_model(config: RunConfig, vocab: int) -> ResolvedModel:
    from seqdsl.check.resized import resize_report
    from seqdsl.ir.presets import model_at
    from seqdsl.passes.resolve import load

    if not config.spec:
        raise SeqError("no spec to train", hint="seqdsl train SPEC.seq (or `spec = ...` in the config)")
    written = load(config.spec).program
    # windows and chunks scale to the context trained at (seq_len), not the preset's
    resized = model_at(written, config.model, config.preset, context=config.seq_len,
                       keep_absolute=config.keep_absolute)
    program, spec = resized.program, resized.model
    seq_len = config.seq_len or spec.context
    spec = _rebuilt(spec, vocab=vocab, context=seq_len)
    used = tuple(dict.fromkeys(spec.mixer))
    trained = nodes.Program(mixers=tuple(program.mixer(m) for m in used), models=(spec,),
                            own=used + (spec.name,))
    report = resize_report(written, resized, built=_rebuilt(spec, vocab=resized.model.vocab))
    return ResolvedModel(trained, spec, format_program(trained), tuple(report))


def _rebuilt(model: nodes.Model, **sizes: int) -> nodes.Model:
    """`model` with other sizes, validated by the IR as a written model is (a vocabulary or
    context out of bounds is one SeqError here, not a failure deep inside torch)."""
    try:
        return nodes.Model.model_validate({**model.model_dump(), **sizes})
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        raise SeqError(f"model `{model.name}` cannot be trained at {first['loc'][0]} {first['input']}: "
                       f"{first['msg'][:1].lower()}{first['msg'][1:]}") from None
