"""The selection a generated kernel serves, typed: the support table (seqdsl/ir/support.py:
`triton`) sends only keys with a selection here, and chunk kernels only chunked ones. The
accessors are the IR's (seqdsl/ir/key.py), which raise when the field is absent."""

from __future__ import annotations

from seqdsl.ir import key as ir_key
from seqdsl.ir.key import KernelKey

selection = ir_key.selection


def chunk_size(key: KernelKey) -> int:
    return ir_key.chunk_size(selection(key))
