"""Autotuning choices Triton cannot keep, recorded on a GPU and put back in memory by seqdsl.

Triton keeps a tuning on disk only when none of the kernel's candidate configs has a
`pre_hook` (`Autotuner.check_disk_cache`: hooks cannot be serialised). mamba-ssm's SSD
backward has three such kernels (`_chunk_scan_chunk_state_bwd_dx_kernel`,
`_chunk_state_bwd_db_kernel`, `_chunk_scan_bwd_dc_kernel`: every config zeroes the outputs the
kernel accumulates into), so every process compiles and times all 9, 9 and 8 of their configs
again, which the shipped autotuning files (`autotune_seed.py`) cannot prevent (Mamba-2's
self-checks take 32-35 s on a fresh H100; docs/training.md says what was measured).

`record()` reads the choices such autotuners hold after a real training step (`Autotuner.cache`:
tuning key -> config) as plain data; `benchmarks/dump_autotune_seed.py` writes them to
`autotune-seed/pins.json` with the GPU's name and the versions of Triton and of the kernel's
package. `pin()` puts each record whose GPU name, Triton version and package version are this
machine's back into its autotuner's memory, as the config object of the autotuner's own list
that has the recorded fields (its pre_hook included), so the kernel runs exactly as after its
own tuning, with the choice its own timing made where it was recorded. A record is skipped when
anything differs: another GPU, version, a kernel no longer there, no config or several with the
recorded fields (the kernel's candidates changed), or a key the autotuner already has.

This module imports neither torch nor triton at import time.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable

from seqdsl.lower.backends.autotune_seed import SEED_DIR

PINS = SEED_DIR / "pins.json"


def _autotuner(obj: Any) -> Any:
    """The Triton Autotuner `obj` is or wraps (through @triton.heuristics), else None."""
    from triton.runtime.autotuner import Autotuner

    for _ in range(4):
        if isinstance(obj, Autotuner):
            return obj
        obj = getattr(obj, "fn", None)
    return None


def _fields(config: Any) -> dict:
    """A config's identity as plain data: its meta-parameters and launch options."""
    return {"kwargs": dict(config.kwargs), "num_warps": config.num_warps, "num_stages": config.num_stages,
            "num_ctas": getattr(config, "num_ctas", 1), "maxnreg": getattr(config, "maxnreg", None)}


def _package_version(module: str) -> str:
    return str(getattr(sys.modules.get(module.split(".")[0]), "__version__", ""))


def record(packages: Iterable[str], gpu: str, triton_version: str) -> list[dict]:
    """Every tuning held in memory now by an autotuner whose configs carry a pre_hook, in the
    imported modules of `packages` (e.g. "mamba_ssm"), as records for `pin`."""
    rows = []
    prefixes = tuple(packages)
    seen: set[int] = set()  # a kernel imported into other modules is recorded once
    for name, module in sorted(sys.modules.items()):
        if module is None or name.split(".")[0] not in prefixes:
            continue
        for attr, obj in sorted(vars(module).items()):
            tuner = _autotuner(obj)
            if tuner is None or id(tuner) in seen or not any(c.pre_hook for c in tuner.configs):
                continue
            seen.add(id(tuner))
            for key, config in tuner.cache.items():
                rows.append({"gpu": gpu, "triton": triton_version, "version": _package_version(name),
                             "module": name, "kernel": attr, "key": list(key), "config": _fields(config)})
    return rows


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """`old` with `new` added, a new record replacing one for the same GPU, versions, kernel
    and key."""
    ident = lambda r: json.dumps([r["gpu"], r["triton"], r["version"], r["module"], r["kernel"], r["key"]])
    merged = {ident(r): r for r in old}
    merged.update({ident(r): r for r in new})
    return [merged[k] for k in sorted(merged)]


def pin(records: Iterable[dict], gpu: str, triton_version: str) -> int:
    """Put the records made on this GPU kind with these versions into their autotuners' memory
    (modules already imported only); the number put."""
    done = 0
    for r in records:
        module = sys.modules.get(r["module"])
        if module is None or (r["gpu"], r["triton"], r["version"]) != (gpu, triton_version,
                                                                        _package_version(r["module"])):
            continue
        tuner = _autotuner(getattr(module, r["kernel"], None))
        if tuner is None:
            continue
        same = [c for c in tuner.configs if _fields(c) == r["config"]]
        key = tuple(r["key"])
        if len(same) != 1 or key in tuner.cache:
            continue
        tuner.cache[key] = same[0]
        done += 1
    return done


def read(path: Path = PINS) -> list[dict]:
    """The records in `path`, as `write` left them ([] when there is no file)."""
    return json.loads(path.read_text())["records"] if path.exists() else []


def write(path: Path, records: list[dict]) -> None:
    """`records` into `path`, in the format `read` takes (benchmarks/dump_autotune_seed.py)."""
    path.write_text(json.dumps({"about": "seqdsl/lower/backends/autotune_pins.py", "records": records}, indent=1) + "\n")


def pin_shipped(path: Path = PINS) -> int:
    """`pin` the shipped records on this machine's first GPU (after a library's import);
    SEQDSL_AUTOTUNE_SEED=0 turns it off with the shipped autotuning files."""
    import torch
    import triton

    if os.environ.get("SEQDSL_AUTOTUNE_SEED") == "0" or not torch.cuda.is_available():
        return 0
    records = read(path)
    if not records:
        return 0
    return pin(records, torch.cuda.get_device_name(0), triton.__version__)

