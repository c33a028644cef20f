"""Autotuning results shipped with seqdsl, seeded into Triton's cache so that a fresh GPU machine
does not autotune third-party kernels again (fla's RWKV-7 kernels: 221 s of a 306 s first step).

Triton's autotuner, with results caching on (fla turns it on for its kernels; seqdsl sets
TRITON_CACHE_AUTOTUNING=1 unless the user set it), keeps each tuning as
`<Triton cache>/<digest>/<kernel>.autotune.json`, where the digest hashes Triton's own build,
the GPU backend (target, ptxas), the kernel's source, the cache-invalidating environment, the
tuning key (the shapes and dtypes) and the candidate configs. `benchmarks/dump_autotune_seed.py`
copies the files a real training step produced on a GPU into `autotune-seed/` here; `seed()`
copies any that are missing into this machine's Triton cache. Safe by construction: Triton
reads a seeded file only when every one of those inputs hashes the same here, so a different
Triton, GPU architecture, kernel version or shape never sees it and autotunes as before; a file
already in the cache is never overwritten. The timings in a file are those measured where it
was recorded (`autotune-seed/README.md` says which GPU and versions).

This module imports neither torch nor triton at import time.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path

SEED_DIR = Path(__file__).resolve().parent / "autotune-seed"  # not an importable name: setuptools takes such folders for packages
SUFFIX = ".autotune.json"


def triton_cache_dir() -> Path:
    """Where Triton keeps its cache here (TRITON_CACHE_DIR, else its default)."""
    try:
        from triton import knobs

        return Path(knobs.cache.dir)
    except Exception:  # an older Triton without knobs, or none: its documented default
        return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def seed_files(root: Path = SEED_DIR) -> list[Path]:
    """The shipped autotuning files, as <digest>/<kernel>.autotune.json under `root`."""
    return sorted(p for p in root.glob(f"*/*{SUFFIX}") if p.is_file())


def seed(dest: Path | None = None, root: Path = SEED_DIR) -> int:
    """Copy the shipped files missing from Triton's cache `dest` (default this machine's);
    the number copied. Each lands whole (written aside, then renamed), so a concurrent reader
    never sees half a file; an unwritable cache is left alone (Triton then autotunes)."""
    dest = triton_cache_dir() if dest is None else dest
    copied = 0
    for src in seed_files(root):
        target = dest / src.parent.name / src.name
        if target.exists():
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("wb", dir=target.parent, delete=False, suffix=".tmp") as tmp:
                tmp.write(src.read_bytes())
            os.replace(tmp.name, target)
        except OSError:
            return copied
        copied += 1
    return copied


@functools.lru_cache(maxsize=None)
def seed_once() -> int:
    """Before a third-party Triton library (fla, mamba-ssm) is first imported (the backends'
    `import_failure` calls it on a GPU): results caching on for every autotuner (Triton reads TRITON_CACHE_AUTOTUNING when a kernel is decorated,
    at import; the user's own setting wins), then the shipped files seeded. SEQDSL_AUTOTUNE_SEED=0
    turns both off."""
    if os.environ.get("SEQDSL_AUTOTUNE_SEED") == "0":
        return 0
    os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    return seed()


def collect(cache: Path, out: Path) -> int:
    """Copy every autotuning file in the Triton cache `cache` into `out` (the dump's side):
    the number copied."""
    n = 0
    for src in seed_files(cache):
        target = out / src.parent.name / src.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        n += 1
    return n
