"""How long the token cache takes to build (seqdsl/data/tokencache.py), with the documents read
on a thread ahead of the tokenizer and read in turn, alternated in one run.

    python benchmarks/bench_token_cache.py --data DIR --tokenizer tokenizer.json [--domain web_blogs] [--repeats 3]

DIR is a folder of domain folders of shards (docs/results.md: the study's corpus); each build
goes to an empty cache folder of its own, so every one tokenizes the whole domain. Prints a table
(seconds per build, median per mode) and writes JSON (--out, default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqdsl.data import tokencache  # noqa: E402
from seqdsl.data.tokenizer import load_tokenizer  # noqa: E402
from seqdsl.run.config import DataConfig  # noqa: E402
from seqdsl.run.data import import_readers, resolve_data  # noqa: E402

MODES = {"read ahead": tokencache.READ_AHEAD, "in turn": 0}


def build_once(data, tokenizer, read_ahead: int) -> tuple[float, int]:
    """(seconds, tokens) of one build into an empty cache folder."""
    tokencache.READ_AHEAD = read_ahead
    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        cache = tokencache.open_cache(data.source, tokenizer, data.cached_domains, data.config.heldout,
                                      root=Path(root), say=lambda line: None)
        return time.perf_counter() - t0, len(cache.tokens)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--domain", default="web_blogs")
    p.add_argument("--heldout", type=float, default=0.01)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="a JSON file or a folder")
    args = p.parse_args(argv)
    import_readers()
    config = DataConfig(source="files", files=[args.data], tokenizer=args.tokenizer, train_domains=[args.domain],
                        eval_domains=[args.domain], heldout=args.heldout)
    data, tokenizer = resolve_data(config), load_tokenizer(args.tokenizer)
    build_once(data, tokenizer, 0)  # the shards in the file cache, the readers warm: not timed
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    tokens = 0
    for _ in range(args.repeats):
        for mode, depth in MODES.items():
            s, tokens = build_once(data, tokenizer, depth)
            seconds[mode].append(s)
    date = datetime.date.today().isoformat()
    print(f"token cache of {args.domain} ({tokens:,} tokens), {os.cpu_count()} cores, {date}")
    print(f"{'mode':<12} {'median s':>9}  builds (s)")
    for mode, times in seconds.items():
        print(f"{mode:<12} {statistics.median(times):>9.2f}  {', '.join(f'{t:.2f}' for t in times)}")
    ratio = statistics.median(seconds["in turn"]) / statistics.median(seconds["read ahead"])
    print(f"read ahead is {ratio:.2f}x as fast as in turn")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results"
    if out.suffix != ".json":
        out = out / f"bench_token_cache_{os.cpu_count()}cores_{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": date, "cores": os.cpu_count(), "machine": platform.processor() or platform.machine(),
                               "domain": args.domain, "tokens": tokens, "seconds": seconds,
                               "speedup": ratio}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
