"""`seqdsl check PATH...`: lint specs against the full-sequence arbitrary selection principle.

Every path is checked, even when an earlier one cannot be read; the exit code is EXIT_CODES.
Text goes to stdout and read errors to stderr; `--format summary` prints one line per spec (its
verdict and the codes behind it) instead of every diagnostic; `--format json` prints one
document for the whole run on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys

from seqdsl.check import check_paths
from seqdsl.check.report import exit_code, format_error, format_spec_line, format_summary, format_text, to_json


def _codes(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return value


EXIT_CODES = (
    "Exit codes follow the verdicts: 0 when every spec passes (speed notes such as W002/W003, a "
    "fast backend falling back to the reference path, and infos do not count); 1 when any spec "
    "is degraded or fails; 2 when an input cannot be read (missing file, syntax or semantic "
    "error, a file with no mixer and no model, an unknown rule code).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXIT_CODES
    parser.add_argument("paths", nargs="+", metavar="PATH", help=".seq files or directories")
    parser.add_argument("--select", type=_codes, action="extend", metavar="CODES",
                        help="only these rules: codes, prefixes (V, N00) or names, comma-separated")
    parser.add_argument("--ignore", type=_codes, action="extend", metavar="CODES",
                        help="skip these rules (same forms as --select); they do not count for verdicts")
    parser.add_argument("--format", choices=("text", "summary", "json"), default="text",
                        help="text: every diagnostic with its source line (default); summary: one line "
                             "per spec, its verdict and the codes behind it; json: one document")
    parser.add_argument("--exit-zero", action="store_true",
                        help="exit 0 even when a spec is degraded or fails "
                             "(2 still means unreadable input)")
    parser.add_argument("--context", type=_positive, metavar="N",
                        help="judge windows and horizons against N tokens instead of the models' context")


def run(args: argparse.Namespace) -> int:
    reports = check_paths(args.paths, select=args.select, ignore=args.ignore, context=args.context)
    code = exit_code(reports)
    if args.exit_zero and code == 1:
        code = 0
    if args.format == "json":
        json.dump(to_json(reports), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return code
    for report in reports:
        if report.error:
            print(format_error(report), file=sys.stderr)
    text = "\n".join(map(format_spec_line, reports)) if args.format == "summary" else format_text(reports)
    if text:
        print(text + "\n")
    print(format_summary(reports))
    return code
