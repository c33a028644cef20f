"""`seqdsl fmt`: canonical formatting, comments kept (seqdsl.fmt). `--resolved` prints the program with imports and
inheritance applied (what the backends see); `--write` rewrites files in place, atomically."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

from seqdsl.fmt import format_source
from seqdsl.ir.printer import format_program
from seqdsl.passes.resolve import load, loads, read_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help=".seq files")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the files in canonical form")
    mode.add_argument("--check", action="store_true", help="exit 1 if a file is not canonical")
    mode.add_argument("--resolved", action="store_true",
                      help="print the resolved program (imports inlined, inheritance applied)")


def _write_atomic(path: Path, text: str) -> None:
    """Replace the file's text in one step. A symlink is written through (its target is
    rewritten, the link stays a link) and the file keeps its permission bits (mkstemp would
    leave 0600)."""
    target = path.resolve()
    mode = os.stat(target).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def run(args: argparse.Namespace) -> int:
    changed = 0
    for raw in args.paths:
        path = Path(raw)
        if args.resolved:
            sys.stdout.write(format_program(load(path).program))
            continue
        text = read_text(path)
        # validate imports and inheritance too, before touching anything
        loads(text, str(path), base_dir=path.parent, _top=path.resolve())
        canonical = format_source(text, str(path))
        if args.write:
            if canonical != text:
                _write_atomic(path, canonical)
                print(f"reformatted {path}", file=sys.stderr)
        elif args.check:
            if canonical != text:
                print(f"would reformat {path}", file=sys.stderr)
                changed += 1
        else:
            sys.stdout.write(canonical)
    return 1 if changed else 0
