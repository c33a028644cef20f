"""The generated kernels run on CPU under Triton's interpreter unless a GPU test says otherwise.

TRITON_INTERPRET is read when a kernel module is imported (seqdsl.kernels.cache.load), so setting
it here, before any kernel is loaded, is enough; an explicit setting in the environment wins.
Rendered modules go to a per-session temporary cache, never the user's.
"""

from __future__ import annotations

import os

import pytest

if not os.environ.get("TRITON_INTERPRET"):
    try:
        import torch

        _cuda = torch.cuda.is_available()
    except ImportError:
        _cuda = False
    if not _cuda:
        os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(autouse=True, scope="session")
def _kernel_cache(tmp_path_factory):
    old = os.environ.get("SEQDSL_CACHE_DIR")
    os.environ["SEQDSL_CACHE_DIR"] = str(tmp_path_factory.mktemp("seqdsl_kernels"))
    yield
    if old is None:
        os.environ.pop("SEQDSL_CACHE_DIR", None)
    else:
        os.environ["SEQDSL_CACHE_DIR"] = old
