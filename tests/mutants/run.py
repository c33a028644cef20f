"""Mutation check: plant each known bug, one at a time, in a copy of the repository and run the
fast tests against it. Every mutant must be caught (some test must fail).

    .venv/bin/python tests/mutants/run.py                 # fast lowering tests, every mutant
    .venv/bin/python tests/mutants/run.py --tests tests   # the whole fast suite
    .venv/bin/python tests/mutants/run.py --only o_equals_v_softmax ste_off

Prints a table (mutant, caught?, first failing test, seconds) and exits 1 if a mutant survives
or the unmutated copy fails. The bugs are those of issue 11's table. Not collected by pytest
(the file name does not start with test_).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    file: str
    old: str
    new: str
    count: int = 1  # how many occurrences of `old` the mutant replaces (all of them)


MUTANTS = (
    Mutant("causal_mask_sees_next", "causal mask lets position i see i+1 (visibility_mask)",
           "seqdsl/reference/attention.py", "mask = j <= i\n", "mask = j <= i + 1\n"),
    Mutant("recurrent_sees_next", "the same in the recurrent (chunked) form",
           "seqdsl/reference/recurrent.py", "return j < i if strict else j <= i\n",
           "return j < i if strict else j <= i + 1\n"),
    Mutant("top1_chunk_second_best", "Top-1 chunk picks the second-best chunk",
           "seqdsl/reference/top1.py", "chosen = _topk_mask(cs, candidate, k_top)  # (B, H, T, C)",
           "chosen = _topk_mask(cs, candidate, k_top + 1) & ~_topk_mask(cs, candidate, k_top)"),
    Mutant("scale_dropped", "softmax scale 1/sqrt(d) dropped where the KernelKey's scale is computed",
           "seqdsl/ir/key.py", "    return 1.0 / math.sqrt(key_dim)\n", "    return 1.0\n"),
    Mutant("scale_dropped_chunk_branch", "softmax scale dropped only in the chunk-selection branch",
           "seqdsl/lower/paths.py", "chunk=sel.chunk, scale=key.scale,", "chunk=sel.chunk, scale=1.0,"),
    Mutant("o_equals_v_softmax", "the softmax mixer does no mixing (o_i = v_i)",
           "seqdsl/lower/mixer.py", 'alibi=getattr(self, "alibi", None)))\n',
           'alibi=getattr(self, "alibi", None))); o = self._shared(v)\n'),
    Mutant("o_equals_v_recurrent", "the recurrent mixer does no mixing (o_i = v_i)",
           "seqdsl/lower/mixer.py", "o, S = self.paths.recurrent(mixed, state.S)",
           "_, S = self.paths.recurrent(mixed, state.S); o = v"),
    Mutant("sdpa_window_off_by_one", "the SDPA window is one token too wide",
           "seqdsl/lower/paths.py", 'T, window=key.window if key.visibility == "window" else None,',
           'T, window=key.window + 1 if key.visibility == "window" else None,'),
    Mutant("ste_off", "straight-through gradients turned off in the lowering (element and chunk)",
           "seqdsl/lower/paths.py", "grad=sel.grad", 'grad="none"', count=2),
)


def copy_repo(dest: Path) -> None:
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis",
                                    "*.egg-info", "runs", "build", "dist")
    shutil.copytree(REPO, dest, ignore=ignore, symlinks=True)


def plant(root: Path, mutant: Mutant) -> None:
    path = root / mutant.file
    text = path.read_text()
    found = text.count(mutant.old)
    if found != mutant.count:
        raise SystemExit(f"mutant {mutant.name}: expected {mutant.count} occurrence(s) of {mutant.old!r} "
                         f"in {mutant.file}, found {found}: update tests/mutants/run.py")
    path.write_text(text.replace(mutant.old, mutant.new))


def run_tests(root: Path, tests: list[str], marker: str) -> tuple[bool, str, float]:
    """(passed, first failing test, seconds) for the tests run inside the copy at `root`."""
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    check = subprocess.run([sys.executable, "-c", "import seqdsl; print(seqdsl.__file__)"],
                           cwd=root, env=env, capture_output=True, text=True)
    if not check.stdout.strip().startswith(str(root)):
        raise SystemExit(f"the copy's seqdsl is not the one imported: {check.stdout}{check.stderr}")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", marker, "-p", "no:cacheprovider",
                           "-rf", *tests], cwd=root, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, flags=re.M)
    if proc.returncode not in (0, 1):
        failed = failed or [f"pytest exit {proc.returncode}: {proc.stdout[-300:]}{proc.stderr[-300:]}"]
    return proc.returncode == 0, (failed[0] if failed else ""), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", nargs="+", default=["tests/lower"], help="pytest paths (default tests/lower)")
    parser.add_argument("--marker", default="not slow", help='pytest -m expression (default "not slow")')
    parser.add_argument("--only", nargs="+", help="mutant names to run (default all)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    rows, survivors = [], 0
    with tempfile.TemporaryDirectory(prefix="seqdsl-mutants-") as tmp:
        base = Path(tmp) / "clean"
        copy_repo(base)
        ok, first, seconds = run_tests(base, args.tests, args.marker)
        if not ok:
            print(f"the unmutated copy fails ({first}): fix the suite first")
            return 1
        print(f"unmutated copy: {' '.join(args.tests)} -m {args.marker!r} passes ({seconds:.0f} s)\n")
        for mutant in chosen:
            root = Path(tmp) / mutant.name
            copy_repo(root)
            plant(root, mutant)
            passed, first, seconds = run_tests(root, args.tests, args.marker)
            survivors += passed
            rows.append((mutant.name, "NOT CAUGHT" if passed else "caught", first, f"{seconds:.0f}"))
            shutil.rmtree(root)
    widths = [max(len(r[i]) for r in rows + [("mutant", "result", "first failing test", "s")]) for i in range(4)]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    print(line(("mutant", "result", "first failing test", "s")))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
