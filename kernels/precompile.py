"""Compiling the Triton kernels a call launches in parallel, before the call runs for real.

A path's first-use self-check runs its forward and backward once, and every Triton kernel they
launch compiles there, one after another, on one core (mamba-ssm's SSD: about 30 s of a fresh
H100 machine's time to first step, docs/training.md). `ahead(call)` runs `call()` once in a dry
mode where a Triton launch does not run its kernel: it only submits the kernel's compilation
to a pool of threads (Triton's own `AsyncCompileMode`; most of a compilation is in MLIR, LLVM
and ptxas, outside Python), and returns at once; then it waits for every compilation. The real
call that follows finds its kernels compiled and runs them.

What the dry call computes is garbage (no kernel ran) and is thrown away; nothing it returns
reaches a result. It only has to take the same kernels and shapes as the real call, which holds
for code whose launches depend on shapes and dtypes, not on values (fla's and mamba-ssm's chunk
kernels, seqdsl's own). Where it cannot go on, the dry call stops there and the rest compiles
in the real call, as without it:
  - an autotuned kernel meeting shapes it has no tuning for (neither in memory nor in Triton's
    autotuning cache): tuning times real launches, which the dry mode does not make, so the
    kernel is left to the real call (`Autotuner._bench` raises `Untuned` here; nothing is
    recorded for the key);
  - any other exception of the dry call, a Triton without `AsyncCompileMode`, Triton's
    interpreter, or SEQDSL_PRECOMPILE=0 (the switch).
A compilation that fails in a thread leaves the kernel to the real call, which raises the same
error there (the self-check's finding). The dry mode replaces `JITFunction.run` and
`Autotuner._bench` for the whole process while it lasts (a lock keeps one at a time); nothing
else launches Triton kernels during planning.

This module imports triton only when `ahead` runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator

log = logging.getLogger("seqdsl")

_LOCK = threading.Lock()


class Untuned(Exception):
    """An autotuned kernel met shapes it has no tuning for during a dry call."""


@dataclass(frozen=True)
class Ahead:
    """What one `ahead` did: `kernels` compilations submitted, `seconds` of wall time (the dry
    call and the compilations), and why the dry call stopped early ("" when it ran through)."""
    kernels: int
    seconds: float
    stopped: str = ""

    def describe(self) -> str:
        end = f"; stopped early: {self.stopped}" if self.stopped else ""
        return f"{self.kernels} Triton kernels compiled ahead in parallel in {self.seconds:.1f} s{end}"


def enabled() -> bool:
    """Off with SEQDSL_PRECOMPILE=0, and under Triton's interpreter (TRITON_INTERPRET=1), where
    nothing compiles and a dry launch would run the kernel."""
    return os.environ.get("SEQDSL_PRECOMPILE", "1") != "0" and os.environ.get("TRITON_INTERPRET", "0") != "1"


@contextlib.contextmanager
def _dry_launches() -> Iterator[None]:
    """Within: a Triton launch compiles its kernel (asynchronously under an active
    AsyncCompileMode) and runs nothing; autotuning that would time launches raises Untuned."""
    from triton.runtime import autotuner, jit

    run, bench = jit.JITFunction.run, autotuner.Autotuner._bench

    def compile_only(self, *args, grid, warmup, **kwargs):
        return run(self, *args, grid=grid, warmup=True, **kwargs)

    def untuned(self, *args, **kwargs):
        raise Untuned(f"{getattr(self, 'base_fn', self.fn).__name__} has no tuning for these shapes yet")

    jit.JITFunction.run, autotuner.Autotuner._bench = compile_only, untuned
    try:
        yield
    finally:
        jit.JITFunction.run, autotuner.Autotuner._bench = run, bench


def ahead(call: Callable[[], object], workers: int | None = None) -> Ahead | None:
    """Compile the Triton kernels `call()` launches, in parallel on `workers` threads (default:
    the machine's cores, at most 16), by one dry call (module docstring). None when switched
    off or when this Triton cannot compile asynchronously; the real call then compiles as usual."""
    if not enabled():
        return None
    try:
        from triton import AsyncCompileMode
    except ImportError:
        return None
    start = time.perf_counter()
    stopped = ""
    with _LOCK, ThreadPoolExecutor(max_workers=workers or min(16, os.cpu_count() or 1)) as pool:
        mode = AsyncCompileMode(pool, ignore_errors=True)
        try:
            with mode, _dry_launches():
                try:
                    call()
                except Untuned as why:
                    stopped = str(why)
                except Exception as err:  # noqa: BLE001 - the real call meets it again, and reports it
                    stopped = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
                submitted = len(mode.future_kernels)
        finally:
            _reset_async_mode()
    report = Ahead(submitted, time.perf_counter() - start, stopped)
    log.info("seqdsl: %s", report.describe())
    return report


def _reset_async_mode() -> None:
    """Leave no AsyncCompileMode active: Triton 3.6's exit skips its reset when a compilation
    it finalizes raises, and every later compilation would then be queued on a closed pool."""
    from triton.runtime import _async_compile

    _async_compile.active_mode.set(None)
