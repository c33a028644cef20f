"""What a run's data config resolves to: the document source, the domains it trains on and is
evaluated on, the packed training stream and the held-out sets. Training and `seqdsl eval` both
resolve data here, so both score the same held-out text."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass

from seqdsl.data.documents import DocumentSource
from seqdsl.data.evalset import EvalSet
from seqdsl.data.heldout import build_eval_sets
from seqdsl.data.packing import Cursor, PackedSequences
from seqdsl.errors import SeqError, did_you_mean
from seqdsl.run.config import ALL, DataConfig


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
                               tokenizer.eos_id, seq_len, self.config.heldout, cursor,
                               mixed=len(self.train_domains) > 1)

    def heldout_sets(self, tokenizer) -> dict[str, EvalSet]:
        """The held-out evaluation set of every evaluated domain (seqdsl/data/heldout.py)."""
        return build_eval_sets(self.source, tokenizer, self.eval_domains, self.train_domains,
                               heldout=self.config.heldout, max_tokens=self.config.eval_tokens)


def import_readers() -> None:
    """Import the libraries that read shards (HF `datasets`, when installed) on the calling
    thread: a run reads its data on a thread of its own while the main one plans the model's
    paths, and both importing at once is how lazily loaded modules are seen half-made."""
    if importlib.util.find_spec("datasets") is not None:
        importlib.import_module("datasets")


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
