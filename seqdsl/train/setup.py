"""What a run config resolves to: the model that is trained, the data source, the domains."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass

from seqdsl.data.documents import DocumentSource
from seqdsl.data.packing import Cursor, PackedSequences
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
    spec = spec.model_copy(update={"vocab": vocab, "context": seq_len})
    used = tuple(dict.fromkeys(spec.mixer))
    trained = nodes.Program(mixers=tuple(program.mixer(m) for m in used), models=(spec,),
                            own=used + (spec.name,))
    report = resize_report(written, resized, built=spec.model_copy(update={"vocab": resized.model.vocab}))
    return ResolvedModel(trained, spec, format_program(trained), tuple(report))


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

    @property
    def cached_domains(self) -> list[str]:
        """The domains the token cache holds: the trained ones (evaluation reads only the few
        held-out documents it needs, straight from the source)."""
        return sorted(self.train_domains)

    def token_cache(self, tokenizer, *, show_progress: bool, say=print):
        """The corpus's verified token cache (seqdsl/data/tokencache.py), built on first use with
        a progress bar; None for a source that is not cached (a hub stream)."""
        from seqdsl.data.tokencache import open_cache

        if not self.config.token_cache:
            return None
        bar = None

        def progress(docs: int, n_bytes: int) -> None:
            nonlocal bar
            if bar is None and show_progress:
                from tqdm import tqdm

                bar = tqdm(desc="tokenizing", unit="B", unit_scale=True, dynamic_ncols=True, file=sys.stderr)
            if bar is not None:
                bar.update(n_bytes)

        try:
            return open_cache(self.source, tokenizer, self.cached_domains, self.config.heldout, say=say,
                              note=say if show_progress else (lambda line: None), progress=progress)
        finally:
            if bar is not None:
                bar.close()

    def training_stream(self, tokenizer, seq_len: int, cursor: Cursor, *, show_progress: bool, say=print):
        """The packed training stream: from the token cache when the source is cached, else
        tokenized on the fly (the same stream and cursor either way)."""
        cache = self.token_cache(tokenizer, show_progress=show_progress, say=say)
        if cache is not None:
            from seqdsl.data.tokencache import CachedSequences

            return CachedSequences(cache, self.train_domains, seq_len, cursor)
        if show_progress:
            say(f"data: {self.source.describe()} is tokenized on the fly (not cached)")
        return PackedSequences(lambda: self.source.documents(self.train_domains), tokenizer.encode,
                               tokenizer.eos_id, seq_len, self.config.heldout, cursor)

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
    # keep_absolute acts through the spec it resolves to, which spec_digest covers: a run from
    # before the key existed resumes when its spec is unchanged
    ignored = ("out", "device_name", "torch_version", "seqdsl_version", "keep_absolute") + LAYOUT_KEYS
    keep = {k: v for k, v in resolved.items() if k not in ignored}
    if isinstance(keep.get("data"), dict):  # the token cache changes how the stream is read, not what it is
        keep["data"] = {k: v for k, v in keep["data"].items() if k != "token_cache"}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]
