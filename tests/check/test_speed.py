"""`seqdsl check` is instant and runs anywhere: the check path imports neither torch nor
triton, and checking the whole spec library takes well under a second."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

SPECS = Path(__file__).resolve().parents[2] / "specs"
HEAVY = ("torch", "triton", "numpy")

PROBE = """
import contextlib, io, sys
from seqdsl.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["check", {specs!r}])
    main(["explain", "V001"])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(code, heavy)
"""


def test_check_cli_imports_no_backend():
    """In a fresh interpreter: run the CLI's check and explain, then look at sys.modules."""
    code = PROBE.format(specs=str(SPECS), heavy=HEAVY)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1 []"


def test_check_library_imports_no_backend():
    code = ("import sys, seqdsl.check, seqdsl.check.report, seqdsl.cli.check, seqdsl.cli.explain\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_checking_the_library_takes_under_a_second():
    from seqdsl.check import check_paths

    check_paths([SPECS])  # warm: builds the Lark parser once per process
    start = time.perf_counter()
    reports = check_paths([SPECS])
    elapsed = time.perf_counter() - start
    assert len(reports) == len(list(SPECS.glob("*.seq")))
    assert elapsed < 1.0, f"check_paths(specs/) took {elapsed:.2f} s"
