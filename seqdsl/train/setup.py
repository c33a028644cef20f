"""What a run config resolves to: the model that is trained, the data source, the domains."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from seqdsl.data.documents import DocumentSource
from seqdsl.errors import SeqError, did_you_mean
from seqdsl.ir import nodes
from seqdsl.ir.printer import format_program
from seqdsl.train.config import DataConfig, RunConfig


@dataclass(frozen=True)
class ResolvedModel:
    program: nodes.Program  # the mixers used and the trained model only
    spec: nodes.Model  # resized to the preset, vocab = the tokenizer's, context = seq_len
    text: str  # the resolved spec (`seqdsl fmt --resolved` form): what spec.seq holds

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def resolve_model(config: RunConfig, vocab: int) -> ResolvedModel:
    from seqdsl.ir.presets import model_at
    from seqdsl.passes.resolve import load

    if not config.spec:
        raise SeqError("no spec to train", hint="seqdsl train SPEC.seq (or `spec = ...` in the config)")
    resized = model_at(load(config.spec).program, config.model, config.preset)
    program, spec = resized.program, resized.model
    seq_len = config.seq_len or spec.context
    spec = spec.model_copy(update={"vocab": vocab, "context": seq_len})
    used = tuple(dict.fromkeys(spec.mixer))
    trained = nodes.Program(mixers=tuple(program.mixer(m) for m in used), models=(spec,),
                            own=used + (spec.name,))
    return ResolvedModel(trained, spec, format_program(trained))


def make_source(data: DataConfig) -> DocumentSource:
    if data.source == "builtin":
        from seqdsl.data.builtin import BuiltinSource

        return BuiltinSource()
    from seqdsl.data.shards import HubSource, ShardSource

    if data.source == "files":
        return ShardSource(data.files, domain_field=data.domain_field, text_field=data.text_field)
    return HubSource(data.hub, split=data.hub_split, domain_field=data.domain_field, text_field=data.text_field)


def resolve_domains(config: RunConfig, source: DocumentSource) -> tuple[list[str], list[str]]:
    """(training domains, evaluated domains: the training ones first, then the others)."""
    listed = config.data.eval_domains
    available = listed if listed is not None and config.data.domain_field else source.domains()
    train = config.train_domains(available)
    evaluated = list(dict.fromkeys(train + (listed if listed is not None else available)))
    for domain in evaluated:
        if domain not in available:
            hint = did_you_mean(domain, available) or f"domains: {', '.join(available)}"
            raise SeqError(f"unknown domain `{domain}`", hint=hint)
    return train, evaluated


# How the global batch is spread over processes changes only the order of float sums, and
# checkpoints hold the full state: a run may resume at another world size or parallelism.
LAYOUT_KEYS = ("processes", "micro_batch", "accumulation", "parallel")


def config_digest(resolved: dict) -> str:
    """What must match for `--resume` to continue the same run (exactly at the same layout)."""
    ignored = ("out", "device_name", "torch_version", "seqdsl_version") + LAYOUT_KEYS
    keep = {k: v for k, v in resolved.items() if k not in ignored}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]
