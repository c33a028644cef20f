"""Autotuning results shipped with seqdsl, seeded into Triton's cache so that a fresh GPU machine
does not autotune third-party kernels again (fla's RWKV-7 kernels: 221 s of a 306 s first step).

Triton's autotuner, with results caching on (fla turns it on for its kernels; seqdsl sets
TRITON_CACHE_AUTOTUNING=1 unless the user set it), keeps each tuning as
`<Triton cache>/<digest>/<kernel>.autotune.json`, where the digest hashes Triton's own build,
the GPU backend (target, ptxas), the kernel's source, the cache-invalidating environment, the
tuning key (the shapes and dtypes) and the candidate configs. `benchmarks/dump_autotune_seed.py`
copies the files a real training step produced on a GPU into `autotune-seed/<gpu>/` here
(`gpu_folder`: the GPU's name and architecture); `seed()` copies any that are missing into this
machine's Triton cache. Safe by construction: Triton reads a seeded file only when every one of
those inputs hashes the same here, so a different Triton, GPU architecture, kernel version or
shape never sees it and autotunes as before; a file Triton wrote is never overwritten.

The digest names the architecture (sm_90), not the GPU: an H100 reads an H200's file. Their
choices differ (RWKV-7's fla kernels: 12 of 15 tunings; `seqdsl train` ran 1.06x faster on an
H100 with the H100's own than with the H200's, docs/training.md), so each GPU's recordings are
kept apart and this GPU's come first; a tuning recorded only on another GPU of the same
architecture is used in their place (the first step would otherwise autotune for minutes), and
`seed_once` says so in one line. A cache file that is byte for byte another GPU's recording was
seeded, not tuned here, and gives way to this GPU's own.

This module imports neither torch nor triton at import time.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

SEED_DIR = Path(__file__).resolve().parent / "autotune-seed"  # not an importable name: setuptools takes such folders for packages
SUFFIX = ".autotune.json"
log = logging.getLogger("seqdsl")


def gpu_folder(name: str, capability: tuple[int, int]) -> str:
    """The folder of a GPU's recordings: its CUDA name in lower case, every run of other
    characters one '-', and its architecture ("NVIDIA H100 80GB HBM3", (9, 0) ->
    "nvidia-h100-80gb-hbm3-sm90")."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return f"{slug}-sm{capability[0]}{capability[1]}"


def _architecture(folder: str) -> str:
    return folder.rsplit("-", 1)[-1]


def triton_cache_dir() -> Path:
    """Where Triton keeps its cache here (TRITON_CACHE_DIR, else its default)."""
    try:
        from triton import knobs

        return Path(knobs.cache.dir)
    except Exception:  # an older Triton without knobs, or none: its documented default
        return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def seed_files(root: Path = SEED_DIR) -> list[Path]:
    """Every shipped autotuning file, as <gpu>/<digest>/<kernel>.autotune.json under `root`."""
    return sorted(p for p in root.glob(f"*/*/*{SUFFIX}") if p.is_file())


def chosen(gpu: str, root: Path = SEED_DIR) -> dict[str, Path]:
    """"<digest>/<kernel>.autotune.json" -> the shipped file to seed it from: the recording of
    the GPU folder `gpu` where there is one, else that of another GPU of the same architecture
    (folders in name order); GPUs of other architectures never (their digests differ)."""
    folders = sorted(p for p in root.glob("*") if p.is_dir() and _architecture(p.name) == _architecture(gpu))
    picked: dict[str, Path] = {}
    for folder in sorted(folders, key=lambda p: p.name != gpu):  # this GPU's first
        for src in sorted(folder.glob(f"*/*{SUFFIX}")):
            picked.setdefault(f"{src.parent.name}/{src.name}", src)
    return picked


def seed(gpu: str, dest: Path | None = None, root: Path = SEED_DIR) -> tuple[int, dict[str, int]]:
    """Copy the shipped tunings (`chosen` for the GPU folder `gpu`) missing from Triton's cache
    `dest` (default this machine's): (the number copied, {other GPU folder: tunings of it used}).
    A file already there stays, unless it is byte for byte another GPU's recording and this
    GPU has its own. Each lands whole (written aside, then renamed), so a concurrent reader
    never sees half a file; an unwritable cache is left alone (Triton then autotunes)."""
    dest = triton_cache_dir() if dest is None else dest
    copied, borrowed = 0, {}  # type: tuple[int, dict[str, int]]
    for name, src in chosen(gpu, root).items():
        recorded_on = src.parent.parent.name
        if recorded_on != gpu:
            borrowed[recorded_on] = borrowed.get(recorded_on, 0) + 1
        target = dest / name
        if target.exists() and not _seeded_from_another_gpu(target, src, gpu, root):
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("wb", dir=target.parent, delete=False, suffix=".tmp") as tmp:
                tmp.write(src.read_bytes())
            os.replace(tmp.name, target)
        except OSError:
            return copied, borrowed
        copied += 1
    return copied, borrowed


def _seeded_from_another_gpu(target: Path, src: Path, gpu: str, root: Path) -> bool:
    """Whether the cache's `target` is another GPU's shipped recording where `src`, this GPU's
    own, should be (never true of a file Triton tuned here)."""
    if src.parent.parent.name != gpu:
        return False
    here = target.read_bytes()
    return here != src.read_bytes() and any(
        other.read_bytes() == here for other in root.glob(f"*/{src.parent.name}/{src.name}") if other != src)


@functools.lru_cache(maxsize=None)
def seed_once(gpu: str) -> int:
    """Before a third-party Triton library (fla, mamba-ssm) is first imported (the backends'
    `import_failure` calls it on a GPU, with `gpu_folder` of this GPU): results caching on for
    every autotuner (Triton reads TRITON_CACHE_AUTOTUNING when a kernel is decorated, at import;
    the user's own setting wins), then the shipped files seeded; one line when some were
    recorded on another GPU. SEQDSL_AUTOTUNE_SEED=0 turns both off."""
    if os.environ.get("SEQDSL_AUTOTUNE_SEED") == "0":
        return 0
    os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    copied, borrowed = seed(gpu)
    if borrowed:
        log.warning("seqdsl: %s of fla's and mamba-ssm's autotuning results shipped for %s were recorded on "
                    "%s, another GPU of this architecture, not on this one (%s): used so that the first step does "
                    "not autotune for minutes; SEQDSL_AUTOTUNE_SEED=0 tunes here instead, which can be faster "
                    "(docs/training.md, \"Autotuning\")", sum(borrowed.values()), _architecture(gpu),
                    ", ".join(borrowed), gpu)
    return copied


def collect(cache: Path, out: Path) -> int:
    """Copy every autotuning file in the Triton cache `cache` (<digest>/<kernel>.autotune.json)
    into `out`, one GPU's folder (the dump's side): the number copied."""
    n = 0
    for src in sorted(p for p in cache.glob(f"*/*{SUFFIX}") if p.is_file()):
        target = out / src.parent.name / src.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        n += 1
    return n
