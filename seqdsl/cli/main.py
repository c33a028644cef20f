"""The `seqdsl` command: parse options, call library functions, print, exit.

Subcommands live in their own modules under seqdsl/cli/ and are imported only when run, so
`seqdsl check` never pays for torch. Each module exposes `add_arguments(parser)` and
`run(args) -> int`; `args.argv` holds the words the command was given (`seqdsl train` repeats
them in the command it prints to continue an interrupted run). User errors (`SeqError`) print one
readable message and exit 2; Ctrl-C exits 130 with one line (`seqdsl train`'s names the command
that resumes the run); a Python traceback reaching the user is a bug.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

from seqdsl.errors import SeqError

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("seqdsl.cli.check", "lint specs against the full-sequence arbitrary selection principle"),
    "explain": ("seqdsl.cli.explain", "explain a checker rule (e.g. `seqdsl explain V001`)"),
    "fmt": ("seqdsl.cli.fmt", "print specs in canonical form (or rewrite them with --write)"),
    "lower": ("seqdsl.cli.lower", "build the PyTorch model of a spec and show the path chosen per layer"),
    "codegen": ("seqdsl.cli.codegen", "write the generated Triton source of a spec's Top-1 mixers"),
    "data": ("seqdsl.cli.data", "tokenize a run config's corpus into the token cache (`seqdsl data prepare`)"),
    "train": ("seqdsl.cli.train", "train a spec on a limited domain, evaluate it out of domain"),
    "eval": ("seqdsl.cli.eval", "evaluate a checkpoint: loss per domain at any context length"),
    "compare": ("seqdsl.cli.compare", "compare runs: OOD loss at matched training loss, table and plot"),
    "probe": ("seqdsl.cli.probe", "train small models of specs on synthetic tasks (recall, copying, needle...), "
                                  "accuracy per difficulty"),
}


def _requested(argv: list[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser. Only the subcommand being run (`only`) has its module imported to
    declare its options: the others are listed by name and help line, so that `seqdsl check`
    never imports the training or lowering commands (and through them torch)."""
    from seqdsl import __version__

    parser = argparse.ArgumentParser(
        prog="seqdsl", description="A compiler for sequence-mixer architectures (.seq specs).")
    parser.add_argument("--version", action="version", version=f"seqdsl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_, description=help_)
        cmd.set_defaults(_module=module)
        if only is None or name == only:
            try:
                importlib.import_module(module).add_arguments(cmd)
            except ModuleNotFoundError as err:
                if err.name != module:
                    raise
                # A command whose module is not there (yet) must not break the others.
                raise SeqError(f"`seqdsl {name}` is not available in this installation") from None
    return parser


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()  # before any subcommand imports torch: time to first step counts it
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(only=_requested(argv) or "")
    except SeqError as err:
        print(err.render(), file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    args.argv = argv
    args.started = started
    try:
        return importlib.import_module(args._module).run(args)
    except SeqError as err:
        print(err.render(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `seqdsl check ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
