"""The compile cache: rendered kernel modules on disk, imported from there.

A kernel module is the text `seqdsl.codegen.render(key)` returns. It is written to
`$SEQDSL_CACHE_DIR/kernels/` (default ~/.cache/seqdsl/kernels/; seqdsl/cache_root.py is the one
rule for every cache's place) under a name that carries a hash of
(key, template source, generator version, Triton version), so a change to any of them renders a
new file, and imported from that file (Triton's jit reads its source there). Triton's own cache
then keeps the compiled binaries.

Variables (docs/kernels.md):
    SEQDSL_CACHE_DIR=dir         the root of seqdsl's caches: rendered modules go to dir/kernels/
    SEQDSL_KERNEL_DUMP=dir       also write each rendered module to dir/<slug>.py (readable copy)
    SEQDSL_KERNEL_OVERRIDE=dir   load dir/<slug>.py instead of the rendered source when it exists
                                 (hand-edited kernels; announced once with a warning)
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import tempfile
import warnings
from pathlib import Path
from types import ModuleType

from seqdsl import codegen
from seqdsl.cache_root import cache_dir as _cache_dir
from seqdsl.ir.key import KernelKey


def cache_dir() -> Path:
    return _cache_dir("kernels")


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # readers never see a half-written module


def module_path(key: KernelKey) -> Path:
    """Where the module for `key` lives (written when missing, or the override file)."""
    import triton

    override = os.environ.get("SEQDSL_KERNEL_OVERRIDE")
    if override and (Path(override) / f"{key.slug()}.py").is_file():
        path = Path(override) / f"{key.slug()}.py"
        warnings.warn(f"seqdsl: kernel {key.slug()} loaded from the hand-edited {path} "
                      "(SEQDSL_KERNEL_OVERRIDE)", stacklevel=3)
        return path
    rendered = codegen.render(key)
    dump = os.environ.get("SEQDSL_KERNEL_DUMP")
    if dump:
        _write_atomic(Path(dump) / f"{key.slug()}.py", rendered.source)
    path = cache_dir() / f"{key.slug()}_{rendered.digest(triton.__version__)}.py"
    if not path.is_file() or path.read_text() != rendered.source:
        _write_atomic(path, rendered.source)
    return path


@functools.lru_cache(maxsize=None)
def load(key: KernelKey) -> ModuleType:
    """The imported kernel module for `key` (once per process)."""
    path = module_path(key)
    name = f"seqdsl_kernels_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"{path} is not a Python file"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton's jit looks its functions' module up by name
    spec.loader.exec_module(module)
    return module
