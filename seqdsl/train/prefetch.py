"""Training batches made ahead of the step that needs them, so the GPU never waits for the CPU.

Shape legend: B global batch, R rows of it this process trains on (M * A), T seq_len.

A background thread takes each global batch from the packed stream (B, T + 1), keeps this
process's rows, pins them (on CUDA) and queues them with the stream's cursor *after* that batch;
the training loop takes the next one, copies it to the device without blocking, and saves the
cursor of the batch it last consumed (never of one merely prefetched), so a checkpoint resumes
exactly. `wait_s` is how long the loop waited for a batch: the training log records it per step.
An exception on the thread (a corrupt shard) is raised in the loop, at the batch it hit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch

from seqdsl.data.packing import Cursor
from seqdsl.data.readahead import ReadAhead

DEPTH = 2  # batches ready ahead: one being copied, one waiting


@dataclass(frozen=True)
class Batch:
    rows: torch.Tensor  # (R, T + 1) int64 on the device
    cursor: Cursor  # the stream's cursor after this batch: what a checkpoint saved now stores
    wait_s: float  # seconds the training loop waited for it


class Prefetcher:
    def __init__(self, stream, batch: int, rows: slice, device: torch.device, *, depth: int = DEPTH):
        self.device = device

        def made():
            while True:
                taken = stream.batch(batch)[rows]
                yield (taken.pin_memory() if device.type == "cuda" else taken), stream.cursor

        self._batches = ReadAhead(made(), depth, name="seqdsl-prefetch")

    def next(self) -> Batch:
        """The next batch; an exception on the thread (a corrupt shard) is raised here."""
        t0 = time.perf_counter()
        rows, cursor = next(self._batches)
        return Batch(rows.to(self.device, non_blocking=True), cursor, time.perf_counter() - t0)

    def close(self) -> None:
        """Stop the thread and wait for it (seqdsl/data/readahead.py): a Ctrl-C must leave one
        line, not a daemon thread's traceback."""
        self._batches.close()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Ahead:
    """`work()` on a thread from now on; `result()` waits for it, returns its value or raises
    its exception, and says how long the work took and how long the caller waited. With
    `background=False` the work runs inside the first `result()` (the same answers, nothing
    overlapped). `result()` may be called again, from any thread: the work runs once."""

    def __init__(self, work, *, background: bool, name: str = "seqdsl-ahead"):
        self._work, self._value, self._error = work, None, None
        self.work_s = 0.0
        self._ran = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True) if background else None
        if self._thread is not None:
            self._thread.start()

    def _run(self) -> None:
        self._ran = True
        t0 = time.perf_counter()
        try:
            self._value = self._work()
        except BaseException as err:  # raised in the caller, by result()
            self._error = err
        finally:
            self.work_s = time.perf_counter() - t0

    def result(self) -> tuple[object, float]:
        """(the work's value, seconds the caller waited for it here)."""
        t0 = time.perf_counter()
        if self._thread is None:
            if not self._ran:
                self._run()
        else:
            self._thread.join()
        wait = time.perf_counter() - t0
        if self._error is not None:
            raise self._error
        return self._value, wait
