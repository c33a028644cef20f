"""Where seqdsl keeps its on-disk caches: one rule for all of them.

    SEQDSL_CACHE_DIR=dir   the root of every cache (default ~/.cache/seqdsl)

Each cache has its own folder under the root, named by its one user:

    kernels/       rendered Triton kernel modules (seqdsl/kernels/cache.py, docs/kernels.md)
    selfcheck/     self-check verdicts of the fast paths (seqdsl/lower/verdicts.py, docs/lowering.md)
    mamba-wheels/  mamba-ssm wheels built per GPU (benchmarks/build_mamba_ssm.py, docs/mamba.md)
    tokens/        tokenized corpora (seqdsl/data/tokencache.py, docs/training.md)

This module imports neither torch nor triton.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHES = ("kernels", "selfcheck", "mamba-wheels", "tokens")


def cache_root() -> Path:
    """$SEQDSL_CACHE_DIR (a leading ~ expanded), or ~/.cache/seqdsl when it is unset or empty."""
    root = os.environ.get("SEQDSL_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "seqdsl"


def cache_dir(name: str) -> Path:
    """The folder of cache `name` (one of CACHES) under the root; not created here."""
    if name not in CACHES:
        raise ValueError(f"unknown cache {name!r}; seqdsl's caches are {', '.join(CACHES)}")
    return cache_root() / name
