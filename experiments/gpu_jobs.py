"""What the study (study.py) and the probe sweep (probe_sweep.py) both do with GPU jobs: run a
`seqdsl ...` command line with its output in a log, name a GPU, and deal queued work to worker
threads, each bound to one GPU, until the queue or a deadline runs out."""

from __future__ import annotations

import queue
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def gpu_name(index: int) -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", str(index)],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or "unknown GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown GPU"


def timed(cmd: list[str], env: dict, log: Path, timeout: float | None = None) -> tuple[int | str, float]:
    """Run a `seqdsl ...` command line with this interpreter (the command a user types, without
    needing the entry point on PATH), its output appended to log: (exit code, or "timeout" past
    `timeout` seconds; wall seconds)."""
    t0 = time.time()
    with log.open("a") as sink:
        sink.write(f"$ {shlex.join(cmd)}\n")
        sink.flush()
        argv = [sys.executable, "-m", "seqdsl.cli.main", *cmd[1:]]
        try:
            rc: int | str = subprocess.run(argv, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                           timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return rc, time.time() - t0


def sayer() -> Callable[[str], None]:
    """A thread-safe printer of time-stamped lines."""
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            print(time.strftime("%H:%M:%S"), line, flush=True)

    return say


def pool(todo: queue.Queue, gpus: list[int], handle: Callable[[object, int], None], *,
         until: float | None, say: Callable[[str], None]) -> None:
    """One worker thread per entry of `gpus` (repeat a GPU for several workers on it), each
    taking items off `todo` and calling handle(item, gpu) until the queue is empty or the
    deadline `until` (seconds since the epoch) has passed; then every worker has ended."""

    def worker(gpu: int) -> None:
        while until is None or time.time() < until:
            try:
                item = todo.get_nowait()
            except queue.Empty:
                return
            handle(item, gpu)
        say(f"gpu {gpu}: stopped at the deadline")

    threads = [threading.Thread(target=worker, args=(g,)) for g in gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
