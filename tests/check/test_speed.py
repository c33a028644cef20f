"""`seqdsl check` is instant and runs anywhere: the check path imports neither torch nor
triton, and checking the whole spec library takes well under a second."""

from __future__ import annotations

import time
from pathlib import Path

from tests.fresh_imports import heavy_imports

SPECS = Path(__file__).resolve().parents[2] / "specs"
HEAVY = ("torch", "triton", "numpy")


def test_check_cli_imports_no_backend():
    """In a fresh interpreter: run the CLI's check and explain, then look at sys.modules."""
    assert heavy_imports("check cli", HEAVY) == ([], "1")


def test_check_library_imports_no_backend():
    assert heavy_imports("check library", HEAVY) == ([], "None")


def test_checking_the_library_takes_under_a_second():
    from seqdsl.check import check_paths

    check_paths([SPECS])  # warm: builds the Lark parser once per process
    start = time.perf_counter()
    reports = check_paths([SPECS])
    elapsed = time.perf_counter() - start
    assert len(reports) == len(list(SPECS.glob("*.seq")))
    assert elapsed < 1.0, f"check_paths(specs/) took {elapsed:.2f} s"
