"""`seqdsl compare RUN...`: OOD loss against training loss across runs (docs/evaluation.md).

Prints a Markdown table per domain (in-domain and OOD) of the loss at matched training loss with
the gap to a baseline run, warns about values interpolated across early or sparse evaluations,
draws the scatter plot (a panel per OOD domain, a curve per run) and optionally writes the
table as JSON. The logic lives in seqdsl/eval/compare.py and plot.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from seqdsl.errors import SeqError, SeqFileError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from seqdsl.eval.compare import DEFAULT_WINDOW, METRICS

    parser.add_argument("runs", metavar="RUN", nargs="+", help="run directories (with metrics.jsonl)")
    parser.add_argument("--baseline", help="the run the gaps are taken against (its directory name; "
                                           "default: the first run)")
    parser.add_argument("--at", metavar="L1,L2,...",
                        help="training-loss levels (nats/token); default: three inside the range "
                             "every run's evaluations cover, after each run's first evaluation "
                             "where they can")
    parser.add_argument("--metric", choices=METRICS, default="loss",
                        help="held-out measure: nats/token (loss), bits/byte (bpb), or the loss on recall "
                             "tokens (completing a bigram seen earlier in the window) or on the others")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                        help=f"train records averaged for the training loss at an evaluation "
                             f"(default {DEFAULT_WINDOW})")
    parser.add_argument("--seq-len", type=int, help="use evaluations at this context length "
                                                    "(default: each run's most common one)")
    parser.add_argument("--plot", default="compare.png", help="PNG to write (default compare.png)")
    parser.add_argument("--no-plot", action="store_true", help="skip the plot")
    parser.add_argument("--out", help="also write the table and curves as JSON here")


def _levels(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        levels = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SeqError(f"bad --at {text!r}", hint="training-loss levels separated by commas, e.g. --at 3.2,3.0") from None
    if not levels:
        raise SeqError("--at names no level", hint="e.g. --at 3.2,3.0")
    return levels


def run(args: argparse.Namespace) -> int:
    from seqdsl.eval.compare import FLAG_MARK, compare, markdown, to_json
    from seqdsl.eval.metrics import read_run
    from seqdsl.eval.plot import plot_file
    from seqdsl.run.layout import guard_output

    runs = [read_run(r) for r in args.runs]
    folders = [Path(r) for r in args.runs]  # before any work: never onto a compared run's own files
    plot_path = None if args.no_plot else guard_output(plot_file(args.plot), "--plot", folders, folder_made=True)
    if args.out:
        guard_output(args.out, "--out", folders)
    for r in runs:
        for note in r.notes:
            print(f"note: {note}", file=sys.stderr)
    cmp = compare(runs, levels=_levels(args.at), baseline=args.baseline, metric=args.metric,
                  window=args.window, seq_len=args.seq_len)
    print(markdown(cmp))
    flagged = [c for cells in (cmp.cells, cmp.in_domain_cells) for c in cells.values() if c.flags]
    if flagged:
        print(f"warning: {len(flagged)} table value(s) are interpolated across early or sparse evaluations "
              f"(marked {FLAG_MARK}; the lines under the levels say which)", file=sys.stderr)
    if plot_path is not None:
        from seqdsl.eval.plot import plot

        print(f"\nplot: {plot(cmp, plot_path)}")
    if args.out:
        try:
            Path(args.out).write_text(json.dumps(to_json(cmp), indent=2) + "\n", encoding="utf-8")
        except OSError as err:
            raise SeqFileError(f"cannot write {args.out}: {err.strerror or err}") from None
        print(f"table: {args.out}")
    return 0
