"""Which heavy modules (torch, triton, numpy) a piece of seqdsl code imports, seen from a fresh
interpreter: the test process has them loaded already, so only a new one can tell.

`import seqdsl`, the checker, codegen and `seqdsl compare` promise to stay free of them (the static
core). A fresh interpreter per promise costs a start-up each (~0.3 s on 2 cores), so every probe
below runs in ONE interpreter, in the order listed, and each records the top-level modules loaded
before and after it. A probe's verdict on a module is exact when that module was not loaded before
it ran: the earlier probes then imported only modules that load it neither at import time nor in
what they ran. Otherwise an earlier probe broke its own promise (its test fails) and this probe
is rerun alone in its own interpreter, so one broken promise never hides or fakes another.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"

# name -> code; `result` (if the code sets it) is reported back as its repr. The compare probe runs
# last: matplotlib loads numpy, which the probes before it must not see.
PROBES = {
    "import seqdsl": "import seqdsl",
    "check library": "import seqdsl.check, seqdsl.check.report, seqdsl.cli.check, seqdsl.cli.explain",
    "check cli": ("from seqdsl.cli.main import main\n"
                  f"result = main(['check', {str(SPECS)!r}])\n"
                  "main(['explain', 'V001'])"),
    "codegen": ("import seqdsl.codegen, seqdsl.cli.codegen\n"
                "from tests.kernels.keys import spec_key\n"
                "seqdsl.codegen.render(spec_key('top1_chunk_approx'))"),
    "compare": ("import seqdsl.cli.compare, seqdsl.eval.compare, seqdsl.eval.metrics, seqdsl.eval.plot, "
                "seqdsl.ir.flops\n"
                "from seqdsl.cli.main import build_parser\n"
                "build_parser(only='compare')"),
}

_RUNNER = """
import contextlib, io, json, sys, traceback
rows = []
for name, code in json.loads(sys.argv[1]):
    before = sorted({m.split(".")[0] for m in sys.modules})
    space, error = {}, ""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec(compile(code, name, "exec"), space)
    except BaseException:
        error = traceback.format_exc()
    after = sorted({m.split(".")[0] for m in sys.modules})
    rows.append(dict(name=name, before=before, after=after, result=repr(space.get("result")), error=error))
print(json.dumps(rows))
"""


@dataclass(frozen=True)
class Outcome:
    before: frozenset[str]  # top-level modules loaded when the probe started
    after: frozenset[str]  # ... and when it ended
    result: str  # repr of the probe's `result`
    error: str  # the traceback if the probe raised, else ""


def _run(names: list[str]) -> dict[str, Outcome]:
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps([(n, PROBES[n]) for n in names])],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    return {r["name"]: Outcome(frozenset(r["before"]), frozenset(r["after"]), r["result"], r["error"]) for r in rows}


@functools.cache
def _all_in_one() -> dict[str, Outcome]:
    return _run(list(PROBES))


def heavy_imports(name: str, heavy: tuple[str, ...]) -> tuple[list[str], str]:
    """(the modules of `heavy` that probe `name` loads, repr of its `result`), as a fresh
    interpreter running only that probe would find them. A probe that raises fails the test."""
    outcome = _all_in_one()[name]
    if outcome.before & set(heavy):  # an earlier probe loaded one: judge this one alone
        outcome = _run([name])[name]
    assert not outcome.error, f"probe {name!r} raised:\n{outcome.error}"
    return sorted(outcome.after & set(heavy)), outcome.result
