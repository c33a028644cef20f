"""`seqdsl data prepare`: tokenize a run's corpus into the token cache before training.

`seqdsl train` and `seqdsl eval` build the cache on first use anyway; this command does it
ahead, with a progress bar, for the same config (so on a GPU machine the first step does not
wait for tokenizing), and prints what the cache holds. See docs/training.md, "Token cache".
"""

from __future__ import annotations

import argparse
import sys
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("prepare",), help="prepare: tokenize the config's corpus into the cache")
    parser.add_argument("--config", metavar="FILE", help="a run config (.json or .toml), e.g. recipes/limited_domain_110m.toml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set data.files='[\"data/web\"]'")
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def run(args: argparse.Namespace) -> int:
    from seqdsl.data.tokenizer import load_tokenizer
    from seqdsl.errors import SeqError
    from seqdsl.run.config import load_config
    from seqdsl.run.data import resolve_data

    config = load_config(args.config, args.overrides)
    tokenizer = load_tokenizer(config.data.tokenizer)
    data = resolve_data(config.data)
    t0 = time.perf_counter()
    cache = data.token_cache(tokenizer, show_progress=not args.quiet)
    if cache is None:
        raise SeqError(f"the data source {data.source.describe()} is not cached (a hub stream is read as it "
                       "comes)", hint="shards on disk (data.files) and the builtin corpus are cached")
    seconds = time.perf_counter() - t0
    docs = cache.docs
    print(f"token cache {cache.path}: {int(docs[:, 1].sum()):,} training tokens in {len(docs):,} pieces "
          f"({cache.tokens.dtype.name}), ready in {seconds:.1f} s")
    for i, domain in enumerate(cache.domains):
        mine = docs[docs[:, 2] == i]
        print(f"  {domain}: {int(mine[:, 1].sum()):,} tokens, {len(mine):,} pieces, "
              f"{int(mine[:, 3].sum()):,} bytes", file=sys.stdout)
    return 0
