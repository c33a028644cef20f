"""`seqdsl explain CODE|NAME`: a checker rule's documentation; `--list` lists every rule."""

from __future__ import annotations

import argparse

from seqdsl.check.registry import PILLARS, lookup, ordered
from seqdsl.errors import SeqError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rule", nargs="?", metavar="CODE", help="a rule code (V001) or name (finite-window)")
    parser.add_argument("--list", action="store_true", help="list every rule")


def run(args: argparse.Namespace) -> int:
    if args.list:
        for r in ordered():
            print(f"{r.code}  {r.name:<30} {r.pillar}  {r.severity:<8} {r.summary}")
        return 0
    if not args.rule:
        raise SeqError("name a rule: `seqdsl explain V001`", None, "`seqdsl explain --list` lists them")
    r = lookup(args.rule)
    print(f"{r.code} {r.name}")
    print(f"pillar: {r.pillar} ({PILLARS[r.pillar]})   default severity: {r.severity}")
    print()
    print(r.doc)
    return 0
