"""Self-check verdicts kept on disk, so that a kernel is checked once per machine, not per process.

A fast path is trusted only after it has matched the reference on this machine (outputs and every
input gradient). That check compiles and autotunes the kernel: seconds to minutes. Its verdict
depends only on facts that do not change between processes (the op, the shapes it was checked
at, the dtype, the GPU model, the versions of torch, Triton, fla and seqdsl, and a digest of
seqdsl's own source, since a fast path's code can change within one version), so it is stored
in one JSON file per verdict under `$SEQDSL_CACHE_DIR/selfcheck/` (default
`~/.cache/seqdsl/selfcheck/`; seqdsl/cache_root.py places every cache), named by a hash of those
facts. A new version of any of them is a new name, hence a new check. `SEQDSL_SELFCHECK_CACHE=0`
turns the store off (always re-check).

Files are written atomically (seqdsl/atomic.py); an unreadable file is treated as absent
and checked again, so a killed write costs one re-check, never a wrong verdict.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import time
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Callable

import torch

from seqdsl.atomic import write_atomic
from seqdsl import cache_root

_PACKAGES = ("torch", "triton", "fla-core", "flash-linear-attention", "mamba-ssm", "seqdsl")


@dataclass
class Spent:
    """What this process's first-use checks and races cost: `seconds` of wall time in the
    `computed` ones, beside the `kept` ones read from disk (the time to first step says it)."""
    seconds: float = 0.0
    computed: int = 0
    kept: int = 0

    def minus(self, earlier: "Spent") -> "Spent":
        """What was spent since `earlier` (a snapshot of the same process)."""
        return Spent(self.seconds - earlier.seconds, self.computed - earlier.computed, self.kept - earlier.kept)


_SPENT = Spent()


def spent() -> Spent:
    """A copy of this process's totals so far."""
    return replace(_SPENT)


def cache_dir() -> Path:
    return cache_root.cache_dir("selfcheck")


def _versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """A digest of seqdsl's source (its packages' .py and .jinja files, the kernels and
    codegen folders included): the version stays 0.1.0 while a path's code changes, and a
    verdict on other code must not be read (a few milliseconds, once per process)."""
    digest = hashlib.sha256()
    for package in ("seqdsl", "seqdsl.kernels", "seqdsl.codegen"):
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(root).rglob("*")):
                if path.suffix in (".py", ".jinja") and "__pycache__" not in path.parts:
                    digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def machine_facts(device: torch.device) -> dict[str, str]:
    """What a verdict depends on besides the check's own arguments."""
    facts = {"device_type": device.type}
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        facts["device_name"] = torch.cuda.get_device_name(index)
        facts["capability"] = ".".join(map(str, torch.cuda.get_device_capability(index)))
    return facts | _versions() | {"seqdsl_source": source_digest()}


def cached(what: dict[str, object], device: torch.device,
           check: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
    """The verdict of `check()` for the facts `what` on `device`, from disk when known."""
    def record() -> dict:
        ok, detail = check()
        return {"ok": ok, "detail": detail}

    stored = _kept(what, device, record, ("ok", "detail"))
    return bool(stored["ok"]), str(stored["detail"])


def timings(what: dict[str, object], device: torch.device,
            measure: Callable[[], dict[str, float]]) -> dict[str, float]:
    """{op: milliseconds} that `measure()` timed for the facts `what` on `device` (a race
    between kernels that passed their self-checks), from disk when known."""
    stored = _kept(what, device, lambda: {"ms": measure()}, ("ms",))
    return {str(op): float(ms) for op, ms in stored["ms"].items()}


def _kept(what: dict[str, object], device: torch.device, compute: Callable[[], dict],
          fields: tuple[str, ...]) -> dict:
    """The JSON record `compute()` makes for the facts `what` on `device`: read from its file when
    one holds every field, else computed and written."""
    if os.environ.get("SEQDSL_SELFCHECK_CACHE", "1") == "0":
        return _timed(compute)
    facts = {k: str(v) for k, v in what.items()} | machine_facts(device)
    name = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]
    path = cache_dir() / f"{name}.json"
    try:
        stored = json.loads(path.read_text())
        if stored.get("facts") == facts and all(f in stored for f in fields):
            _SPENT.kept += 1
            return stored
    except (OSError, ValueError, AttributeError):
        pass  # absent or unreadable: compute again
    return _write(path, facts, _timed(compute))


def _timed(compute: Callable[[], dict]) -> dict:
    t0 = time.perf_counter()
    try:
        return compute()
    finally:
        _SPENT.seconds += time.perf_counter() - t0
        _SPENT.computed += 1


def _write(path: Path, facts: dict[str, str], record: dict) -> dict:
    """`record` (returned), stored under `path` with its facts, atomically."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"facts": facts, **record}, indent=1))
    except OSError:
        pass  # a read-only home: the record still holds for this process
    return record
