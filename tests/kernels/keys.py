"""Kernel keys for the kernel tests, built from the shipped specs (not written by hand)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from seqdsl.ir.key import KernelKey, kernel_key
from seqdsl.passes.resolve import load

SPECS = Path(__file__).resolve().parents[2] / "specs"


@functools.lru_cache(maxsize=None)
def spec_key(spec: str) -> KernelKey:
    """The key of the first layer's mixer of the last model in specs/<spec>.seq."""
    program = load(SPECS / f"{spec}.seq").program
    model = program.models[-1]
    return kernel_key(program.mixer(model.mixer[0]), model.d_model)


def variant(base: str, *, dk: int, dv: int, scale: float | None = None, temperature: float = 1.0,
            **select) -> KernelKey:
    """The key of specs/<base>.seq with other head dims, scale, temperature or selection fields."""
    key = spec_key(base)
    return dataclasses.replace(
        key, key_dim=dk, feature_dim=dk, head_dim=dv, value_cols=dv, temperature=temperature,
        scale=dk ** -0.5 if scale is None else scale, select=dataclasses.replace(key.select, **select))
