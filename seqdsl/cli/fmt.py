"""`seqdsl fmt`: canonical formatting, comments kept (seqdsl.fmt). `--resolved` prints the program with imports and
inheritance applied (what the backends see); `--write` rewrites files in place, atomically.

Paths are files or directories (their *.seq files, as `seqdsl check` reads them). Every file is
handled even when an earlier one cannot be read: its error goes to stderr and the run goes on.
Exit code: the worst over all files: 2 if any could not be read, else 1 if `--check` found one
not in canonical form, else 0."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seqdsl.atomic import write_atomic
from seqdsl.check.engine import SpecReport, expand_paths
from seqdsl.check.report import format_error
from seqdsl.errors import SeqError, SeqFileError
from seqdsl.fmt import format_source
from seqdsl.ir.printer import format_program
from seqdsl.passes.resolve import load, loads, read_text

CANONICAL, CHANGED, UNREADABLE = 0, 1, 2  # also the exit codes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help=".seq files or directories")
    parser.epilog = ("Every file is handled, even after one that cannot be read. Exit code: 2 if any file "
                     "could not be read, else 1 if --check found one not in canonical form, else 0.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the files in canonical form")
    mode.add_argument("--check", action="store_true", help="exit 1 if a file is not canonical")
    mode.add_argument("--resolved", action="store_true",
                      help="print the resolved program (imports inlined, inheritance applied)")


def _one(path: Path, args: argparse.Namespace, header: str) -> int:
    """Format one file as the mode asks; its outcome (CANONICAL, CHANGED or UNREADABLE)."""
    if args.resolved:
        sys.stdout.write(header + format_program(load(path).program))
        return CANONICAL
    text = read_text(path)
    # validate imports and inheritance too, before touching anything
    loads(text, str(path), base_dir=path.parent, _top=path.resolve())
    canonical = format_source(text, str(path))
    if canonical == text:
        if not (args.write or args.check):
            sys.stdout.write(header + canonical)
        return CANONICAL
    if args.write:
        try:
            write_atomic(path, canonical)
        except OSError as err:
            raise SeqFileError(f"cannot write {path}: {err.strerror or err}") from None
        print(f"reformatted {path}", file=sys.stderr)
    elif args.check:
        print(f"would reformat {path}", file=sys.stderr)
    else:
        sys.stdout.write(header + canonical)
    return CHANGED


def run(args: argparse.Namespace) -> int:
    files = expand_paths(args.paths)
    # Printing several files to stdout: a comment line names each, as `head` does.
    several = len(files) > 1 and not (args.write or args.check)
    outcomes = []
    for n, (path, error) in enumerate(files):
        header = f"{chr(10) if n else ''}# ==> {path} <==\n" if several else ""
        if error is None:
            try:
                outcomes.append(_one(path, args, header))
                continue
            except SeqError as err:
                error = err
        # rendered as `seqdsl check` renders an unreadable file (named even without a span)
        print(format_error(SpecReport(path=str(path), verdict="error", error=error)), file=sys.stderr)
        outcomes.append(UNREADABLE)
    if args.write or args.check:
        print(_summary(outcomes, args.write), file=sys.stderr)
    if UNREADABLE in outcomes:
        return UNREADABLE
    return CHANGED if args.check and CHANGED in outcomes else CANONICAL


def _summary(outcomes: list[int], wrote: bool) -> str:
    changed = "reformatted" if wrote else "would be reformatted"
    parts = [f"{outcomes.count(CHANGED)} {changed}", f"{outcomes.count(CANONICAL)} already canonical"]
    if UNREADABLE in outcomes:
        parts.append(f"{outcomes.count(UNREADABLE)} unreadable")
    return f"{len(outcomes)} file{'s' if len(outcomes) != 1 else ''}: " + ", ".join(parts)
