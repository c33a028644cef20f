"""`seqdsl train SPEC`: train a spec on a limited (or mixed) domain and evaluate it out of domain.

The run config comes from `--config FILE` (JSON or TOML, see recipes/), then `--set key=value`
overrides, then the explicit flags below. Several processes: `torchrun --nproc_per_node N -m
seqdsl.cli.main train ...`. Ctrl-C exits 130 with one line naming the last checkpoint and the
command that continues the run from it. See docs/training.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from seqdsl.ir import nodes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", nargs="?", help="the .seq file (or `spec` in the config)")
    parser.add_argument("--config", metavar="FILE", help="a run config (.json or .toml), e.g. recipes/tiny_builtin.toml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set lr=1e-3 --set data.train_domains='[\"*\"]'")
    parser.add_argument("--model", help="which model of the file (default: its last model)")
    parser.add_argument("--preset", choices=nodes.PRESETS, help="resize the model to a preset")
    parser.add_argument("--keep-absolute", action=argparse.BooleanOptionalAction, default=None, dest="keep_absolute",
                        help="with a preset: keep windows and chunks in tokens instead of scaling them with "
                             "the context (config key keep_absolute)")
    parser.add_argument("--tokens", type=int, help="training tokens")
    parser.add_argument("--batch", type=int, help="global batch, in sequences")
    parser.add_argument("--seq-len", type=int, dest="seq_len", help="training sequence length")
    parser.add_argument("--lr", type=float, help="peak learning rate")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--device", help="cpu, cuda, cuda:N (default: cuda if available)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the model's blocks and its loss head (default off; config key compile; "
                             "compile_scope = block compiles blocks of one structure once; cuda_graphs = true "
                             "replays them as CUDA graphs)")
    parser.add_argument("--out", help="run directory (default: runs/<model>-<preset>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def run(args: argparse.Namespace) -> int:
    from seqdsl.run.config import load_config
    from seqdsl.train.run import train

    config = load_config(args.config, args.overrides, spec=args.spec, model=args.model, preset=args.preset,
                         tokens=args.tokens, batch=args.batch, seq_len=args.seq_len, lr=args.lr, seed=args.seed,
                         device=args.device, compile=args.compile, keep_absolute=args.keep_absolute)
    out = Path(args.out) if args.out else Path("runs") / f"{Path(config.spec).stem}-{config.preset or 'spec'}"
    interrupted = False
    try:
        train(config, out, resume=args.resume, show_progress=not args.quiet, launched=getattr(args, "started", None))
    except KeyboardInterrupt:
        interrupted = True
    # said outside the handler: by then the run's frames are released and its progress bar closed
    if interrupted:
        if os.environ.get("RANK", "0") == "0":  # under torchrun every process gets the Ctrl-C
            print(interrupted_line(out, getattr(args, "argv", None) or ["train", config.spec]), file=sys.stderr)
        return 130
    if not args.quiet:
        print(f"run written to {out} (metrics.jsonl, checkpoints/)")
    return 0


def interrupted_line(out: Path, argv: list[str]) -> str:
    """The one line a Ctrl-C leaves: the last checkpoint and the command that continues from it."""
    from seqdsl.run.checkpoint import latest_name
    from seqdsl.run.layout import METRICS
    from seqdsl.train.run import holds_evaluations

    name = latest_name(out / "checkpoints")
    if name is None and holds_evaluations(out / METRICS):  # a fresh start there is refused: it would overwrite them
        return (f"interrupted before the first checkpoint of {out}; nothing to resume, and its evaluations are in "
                f"{out / METRICS}: start again in another --out, or remove {out} first")
    if name is None:
        return (f"interrupted before the first checkpoint of {out}; nothing to resume, start again with: "
                f"{continue_command(argv, out, resume=False)}")
    step = name.removeprefix("step_").lstrip("0") or "0"
    return (f"interrupted; the last checkpoint of {out} is step {step} ({out / 'checkpoints' / name}); "
            f"continue with: {continue_command(argv, out, resume=True)}")


def continue_command(argv: list[str], out: Path, *, resume: bool) -> str:
    """The command line that was run, with `--out` made explicit and `--resume` added (or
    dropped), quoted for a POSIX shell; under torchrun, its launcher on this node."""
    words = [w for w in argv if w != "--resume"]
    if not any(w == "--out" or w.startswith("--out=") for w in words):
        words += ["--out", str(out)]
    if resume:
        words.append("--resume")
    return shlex.join(_launcher() + words)


def _launcher() -> list[str]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return ["seqdsl"]
    per_node = os.environ.get("LOCAL_WORLD_SIZE", str(world))
    nodes = world // int(per_node)
    return (["torchrun"] + (["--nnodes", str(nodes)] if nodes > 1 else [])
            + ["--nproc_per_node", per_node, "-m", "seqdsl.cli.main"])
