"""flash-linear-attention (fla) as a test oracle: its pure-PyTorch naive references run on CPU.

fla is part of the `dev` extra (README's install), so a missing fla is a broken install, not a
reason to skip: these helpers fail the test with the command that fixes it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

INSTALL = 'pip install -e ".[dev]" (the dev extra installs flash-linear-attention, fla-core and einops)'


def fla_root() -> Path:
    """The installed fla package's folder, or a test failure saying how to install it."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"flash-linear-attention (fla) is not installed; the oracle tests need it: {INSTALL}",
                    pytrace=False)
    return Path(spec.submodule_search_locations[0])


def require_fla() -> None:
    """Import fla, or fail the test saying how to install it."""
    fla_root()
    import fla  # noqa: F401  (the whole library: planning asks it which kernels exist)
