"""The selection a generated kernel serves, typed: the support table (seqdsl/ir/support.py:
`triton`) sends only keys with a selection here, and chunk kernels only chunked ones."""

from __future__ import annotations

from seqdsl.ir.key import KernelKey, SelectKey


def selection(key: KernelKey) -> SelectKey:
    if key.select is None:
        raise ValueError(f"the generated kernels serve selection keys only, not {key!r}")
    return key.select


def chunk_size(key: KernelKey) -> int:
    chunk = selection(key).chunk
    if chunk is None:
        raise ValueError(f"a chunk kernel for an element selection: {key!r}")
    return chunk
