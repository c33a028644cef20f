"""seqdsl's custom ops are named by their schema (seqdsl/custom_ops.py): torch's compile caches
know an op by its name, so two schemas must never share one."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from seqdsl import custom_ops


def _two(x: Tensor) -> tuple[Tensor, Tensor]:
    return x.clone(), x.clone()


def _four(x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return x.clone(), x.clone(), x.clone(), x.clone()


def test_a_changed_schema_is_a_new_op_name():
    two, four = custom_ops.qualified_name("ssd", _two), custom_ops.qualified_name("ssd", _four)
    assert two.startswith("ssd_") and four.startswith("ssd_") and two != four
    assert custom_ops.qualified_name("ssd", _two) == two  # the same schema: the same name


def test_a_registered_op_runs_and_is_found_by_its_name():
    @custom_ops.custom_op("test_only_double")
    def double(x: Tensor) -> Tensor:
        return x * 2

    x = torch.arange(3.0)
    assert torch.equal(double(x), x * 2)
    op = custom_ops.op("test_only_double")
    assert op.name().startswith("seqdsl::test_only_double_")
    assert torch.equal(op(x), x * 2)


def test_an_unknown_op_is_a_clear_error():
    with pytest.raises(KeyError, match="no seqdsl custom op 'nothing_here'"):
        custom_ops.op("nothing_here")
