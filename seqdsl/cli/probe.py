"""`seqdsl probe SPEC... --tasks mqar,copy,...`: train each spec's small model on synthetic tasks
and report accuracy per task and difficulty (docs/probes.md).

Prints a table, appends one JSON record per (spec, task, difficulty) to OUT/probe.jsonl as it is
measured (`--resume` skips the finished ones), and draws accuracy against difficulty per spec
(OUT/probe.png). The logic lives in seqdsl/probe/.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from seqdsl.probe.fit import Settings
    from seqdsl.probe.registry import TASKS

    d = Settings()
    parser.add_argument("specs", metavar="SPEC", nargs="+", help=".seq files (each file's last model)")
    parser.add_argument("--tasks", default="all",
                        help="comma-separated tasks, or all (default): "
                             + "; ".join(f"{name}, {what}" for name, (_, what) in TASKS.items()))
    parser.add_argument("--out", default="runs/probe", help="output folder (default runs/probe)")
    parser.add_argument("--seq-len", type=int, default=32, dest="seq_len",
                        help="base sequence length; each task's difficulties are set around it (default 32)")
    parser.add_argument("--preset", default="tiny", help="model size (default tiny: 2 layers, d_model 128)")
    parser.add_argument("--model", help="which model of each file (default: its last model)")
    parser.add_argument("--keep-absolute", action="store_true", dest="keep_absolute",
                        help="keep windows and chunks in tokens instead of scaling them with the context")
    parser.add_argument("--steps", type=int, default=d.steps, help=f"training steps per (spec, task) (default {d.steps})")
    parser.add_argument("--batch", type=int, default=d.batch, help=f"rows per step (default {d.batch})")
    parser.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr})")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--eval-examples", type=int, default=d.eval_examples, dest="eval_examples",
                        help=f"rows scored per difficulty (default {d.eval_examples})")
    parser.add_argument("--needle-text", dest="needle_text", metavar="SOURCE",
                        help="hide the needle in held-out text instead of random tokens: builtin, "
                             "builtin:DOMAIN, or data files/folders")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N (default: cuda if available)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--resume", action="store_true", help="skip the results OUT/probe.jsonl already holds")
    parser.add_argument("--no-plot", action="store_true", dest="no_plot", help="skip the plot")
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def run(args: argparse.Namespace) -> int:
    import torch

    from seqdsl.probe.fit import Settings
    from seqdsl.probe.needle import load_text
    from seqdsl.probe.plot import plot
    from seqdsl.probe.records import RECORDS, table
    from seqdsl.probe.registry import make_task, task_names
    from seqdsl.probe.sweep import check_positive, plan_jobs, run_sweep
    from seqdsl.run.device import pick_device

    check_positive(seq_len=args.seq_len, steps=args.steps, batch=args.batch, lr=args.lr,
                   eval_examples=args.eval_examples, threads=args.threads)
    names = task_names(args.tasks)
    text = load_text(args.needle_text) if args.needle_text and "needle" in names else None
    tasks = [make_task(name, text=text, text_name=args.needle_text) for name in names]
    settings = Settings(steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed,
                        eval_examples=args.eval_examples)
    jobs = plan_jobs(args.specs, tasks, seq_len=args.seq_len, preset=args.preset, model=args.model,
                     keep_absolute=args.keep_absolute)
    device = pick_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    records = run_sweep(jobs, out, settings=settings, preset=args.preset, keep_absolute=args.keep_absolute,
                        device=device, resume=args.resume, show_progress=not args.quiet)
    print(table(records))
    print(f"\nrecords: {out / RECORDS}")
    if not args.no_plot:
        drawn = plot(records, out / "probe.png")
        print(f"plot: {drawn}" if drawn else "plot: not drawn, matplotlib is not installed "
                                             '(pip install "seqdsl[train]", or pass --no-plot)')
    return 0
