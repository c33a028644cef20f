"""`seqdsl train SPEC`: train a spec on a limited (or mixed) domain and evaluate it out of domain.

The run config comes from `--config FILE` (JSON or TOML, see recipes/), then `--set key=value`
overrides, then the explicit flags below. Several processes: `torchrun --nproc_per_node N -m
seqdsl.cli.main train ...`. See docs/training.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", nargs="?", help="the .seq file (or `spec` in the config)")
    parser.add_argument("--config", metavar="FILE", help="a run config (.json or .toml), e.g. recipes/tiny_builtin.toml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set lr=1e-3 --set data.train_domains='[\"*\"]'")
    parser.add_argument("--model", help="which model of the file (default: its last model)")
    parser.add_argument("--preset", help="model size: tiny, 110m, 1.3b")
    parser.add_argument("--tokens", type=int, help="training tokens")
    parser.add_argument("--batch", type=int, help="global batch, in sequences")
    parser.add_argument("--seq-len", type=int, dest="seq_len", help="training sequence length")
    parser.add_argument("--lr", type=float, help="peak learning rate")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--device", help="cpu, cuda, cuda:N (default: cuda if available)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile each block (default off)")
    parser.add_argument("--out", help="run directory (default: runs/<model>-<preset>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def run(args: argparse.Namespace) -> int:
    from seqdsl.train.config import load_config
    from seqdsl.train.run import train

    config = load_config(args.config, args.overrides, spec=args.spec, model=args.model, preset=args.preset,
                         tokens=args.tokens, batch=args.batch, seq_len=args.seq_len, lr=args.lr, seed=args.seed,
                         device=args.device, compile=args.compile)
    out = Path(args.out) if args.out else Path("runs") / f"{Path(config.spec).stem}-{config.preset or 'spec'}"
    train(config, out, resume=args.resume, show_progress=not args.quiet)
    if not args.quiet:
        print(f"run written to {out} (metrics.jsonl, checkpoints/)")
    return 0
