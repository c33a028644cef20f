"""What a run config resolves to: the model that is trained, the data source, the domains."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from seqdsl.data.documents import DocumentSource
from seqdsl.data.evalset import EvalSet
from seqdsl.data.heldout import build_eval_sets
from seqdsl.errors import SeqError, did_you_mean
from seqdsl.ir import nodes
from seqdsl.ir.printer import format_program
from seqdsl.train.config import ALL, DataConfig, RunConfig


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


@dataclass(frozen=True)
class RunData:
    """What a run's data config resolves to: its source, the domains it trains on and the domains
    it is evaluated on. `resolve_data` is the one mapping from a `DataConfig` to these, used by
    training and by `seqdsl eval` (seqdsl/eval/sets.py), so both score the same held-out text."""

    config: DataConfig
    source: DocumentSource
    train_domains: list[str]
    eval_domains: list[str]  # the training domains first (by default), then the others

    @property
    def ood_domains(self) -> list[str]:
        return [d for d in self.eval_domains if d not in self.train_domains]

    def heldout_sets(self, tokenizer) -> dict[str, EvalSet]:
        """The held-out evaluation set of every evaluated domain (seqdsl/data/heldout.py)."""
        return build_eval_sets(self.source, tokenizer, self.eval_domains, self.train_domains,
                               heldout=self.config.heldout, max_tokens=self.config.eval_tokens)


def make_source(data: DataConfig) -> DocumentSource:
    if data.source == "builtin":
        from seqdsl.data.builtin import BuiltinSource

        return BuiltinSource()
    from seqdsl.data.shards import HubSource, ShardSource

    if data.source == "files":
        return ShardSource(data.files, domain_field=data.domain_field, text_field=data.text_field)
    return HubSource(data.hub, split=data.hub_split, domain_field=data.domain_field, text_field=data.text_field)


def resolve_data(data: DataConfig, *, only: list[str] | None = None) -> RunData:
    """The source of `data` and its domains. Evaluated: the training domains, then
    `data.eval_domains` (default: every domain of the source); or exactly `only` when given
    (`seqdsl eval --domains`; `[ALL]`: every domain of the source). A domain the source does not
    have is one SeqError."""
    source = make_source(data)
    listed = data.eval_domains if only is None else (None if ALL in only else list(only))
    # with a domain field the source cannot list its domains without reading everything: the
    # listed ones are taken as they are
    available = listed if listed is not None and data.domain_field else source.domains()
    train = data.training_domains(available)
    chosen = listed if listed is not None else available
    evaluated = list(dict.fromkeys((train if only is None else []) + chosen))
    for domain in evaluated:
        if domain not in available:
            hint = did_you_mean(domain, available) or f"domains: {', '.join(available)}"
            raise SeqError(f"unknown domain `{domain}`", hint=hint)
    return RunData(data, source, train, evaluated)


# How the global batch is spread over processes changes only the order of float sums, and
# checkpoints hold the full state: a run may resume at another world size or parallelism.
LAYOUT_KEYS = ("processes", "micro_batch", "accumulation", "parallel")


def config_digest(resolved: dict) -> str:
    """What must match for `--resume` to continue the same run (exactly at the same layout)."""
    ignored = ("out", "device_name", "torch_version", "seqdsl_version") + LAYOUT_KEYS
    keep = {k: v for k, v in resolved.items() if k not in ignored}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]
