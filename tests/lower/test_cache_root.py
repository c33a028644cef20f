"""One rule places every on-disk cache (seqdsl/cache_root.py): the rendered kernels
(kernels/cache.py), the self-check verdicts (seqdsl/lower/verdicts.py) and the mamba-ssm wheels
(benchmarks/build_mamba_ssm.py) all live under $SEQDSL_CACHE_DIR, default ~/.cache/seqdsl."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from seqdsl import cache_root
from seqdsl.data import tokencache
from seqdsl.kernels import cache as kernel_cache
from seqdsl.lower import verdicts

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "build_mamba_ssm.py"


def _places() -> dict[str, Path]:
    return {"kernels": kernel_cache.cache_dir(), "selfcheck": verdicts.cache_dir(), "tokens": tokencache.default_root(),
            "mamba-wheels": runpy.run_path(str(BUILD_SCRIPT), run_name="build_mamba_ssm")["cache_root"](None)}


def test_every_cache_is_a_named_folder_under_the_variables_root(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQDSL_CACHE_DIR", str(tmp_path))
    assert _places() == {name: tmp_path / name for name in cache_root.CACHES}


@pytest.mark.parametrize("value", [None, ""])
def test_without_the_variable_every_cache_is_under_the_home_cache(monkeypatch, tmp_path, value):
    if value is None:
        monkeypatch.delenv("SEQDSL_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("SEQDSL_CACHE_DIR", value)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _places() == {name: tmp_path / ".cache" / "seqdsl" / name for name in cache_root.CACHES}


def test_an_unknown_cache_name_is_refused():
    with pytest.raises(ValueError, match="unknown cache"):
        cache_root.cache_dir("wheels")
