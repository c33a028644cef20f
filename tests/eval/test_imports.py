"""`seqdsl compare` and the FLOP count never import torch (compare reads JSON and draws;
seqdsl/ir/flops.py sits in the torch-free core)."""

from __future__ import annotations

import subprocess
import sys


def test_compare_and_flops_do_not_import_torch():
    code = ("import sys, seqdsl.cli.compare, seqdsl.eval.compare, seqdsl.eval.metrics, seqdsl.eval.plot, "
            "seqdsl.ir.flops; from seqdsl.cli.main import build_parser; build_parser(only='compare'); "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
