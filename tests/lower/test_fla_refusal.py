"""fla's refusal of its gated backward on Hopper with Triton in [3.4.0, 3.7.1) (fla #640), read
ahead from the GPU and Triton's version (seqdsl/lower/backends/fla.py: known_refusal) without
importing fla: on a fresh machine the import takes seconds for a library that would not run."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import triton

from seqdsl.ir.key import KernelKey
from seqdsl.lower.backends import fla


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA device of a chosen compute capability, Triton of a chosen version, fla installed
    but never imported (importable() fails the test), no TileLang."""
    def set_up(major: int, version: str):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (major, 0))
        monkeypatch.setattr(triton, "__version__", version)
        real = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: object() if name == "fla" else None if name == "tilelang" else real(name, *a))
        monkeypatch.setattr(fla, "importable", lambda: pytest.fail("fla was imported to decide a known refusal"))
        fla.known_refusal.cache_clear()
    yield set_up
    fla.known_refusal.cache_clear()


def _key(decay: str) -> KernelKey:
    return type("Key", (), {"decay_shape": decay})()  # known_refusal reads only the decay's shape


@pytest.mark.parametrize("version", ["3.4.0", "3.6.0", "3.7.0+git1234"])
def test_gated_backward_is_refused_on_hopper_with_the_triton_versions_fla_refuses(gpu, version):
    gpu(9, version)
    why = fla.FlaBackend().known_refusal(_key("scalar"), "fla.chunk_gated_delta_rule")
    assert why == (f"fla's gated backward (chunk_bwd_dqkwg) is wrong on Hopper with Triton {version} < 3.7.1 "
                   "(fla #640); fla refuses it")


@pytest.mark.parametrize("major, version, op, decay", [
    (9, "3.7.1", "fla.chunk_gated_delta_rule", "scalar"),  # fixed Triton
    (9, "3.3.1", "fla.chunk_gated_delta_rule", "scalar"),  # before the regression
    (8, "3.6.0", "fla.chunk_gated_delta_rule", "scalar"),  # not Hopper
    (9, "3.6.0", "fla.chunk_gated_delta_rule", "none"),  # no gate: another backward
    (9, "3.6.0", "fla.chunk_rwkv7", "vector"),  # not a gated dqkwg op
])
def test_no_refusal_elsewhere(gpu, monkeypatch, major, version, op, decay):
    gpu(major, version)
    assert fla.known_refusal(op, decay) == ""
    monkeypatch.setattr(fla, "importable", lambda: True)  # then whether fla imports decides
    assert fla.FlaBackend().known_refusal(_key(decay), op) == ""
