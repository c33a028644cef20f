"""`seqdsl compare` and the FLOP count never import torch (compare reads JSON and draws;
seqdsl/ir/flops.py sits in the torch-free core)."""

from __future__ import annotations

from tests.fresh_imports import heavy_imports


def test_compare_and_flops_do_not_import_torch():
    assert heavy_imports("compare", ("torch",))[0] == []
