"""The prefetcher (seqdsl/train/prefetch.py): batches made on a thread are the stream's batches,
in order, each with the cursor after it (what a checkpoint must save); a failure on the thread
is raised in the loop; closing never hangs. `Ahead` (the run's data read beside path planning):
the work runs before it is asked for, its value or its exception reaches the caller."""

from __future__ import annotations

import threading

import pytest
import torch

from seqdsl.data.documents import Document
from seqdsl.data.packing import PackedSequences
from seqdsl.data.tokenizer import ByteTokenizer
from seqdsl.train.prefetch import Ahead, Prefetcher

DOCS = [Document("web", f"document {i} " + "ab" * (i % 5)) for i in range(30)]


def _stream() -> PackedSequences:
    tok = ByteTokenizer()
    return PackedSequences(lambda: iter(DOCS), tok.encode, tok.eos_id, 8, 0.1)


def test_prefetched_batches_and_cursors_are_the_streams_in_order():
    direct = _stream()
    expected = []
    for _ in range(12):
        rows = direct.batch(4)[1:3]  # this process's rows of each global batch
        expected.append((rows.tolist(), direct.cursor))
    with Prefetcher(_stream(), 4, slice(1, 3), torch.device("cpu")) as ahead:
        got = [ahead.next() for _ in range(12)]
    assert [(b.rows.tolist(), b.cursor) for b in got] == expected
    assert all(b.wait_s >= 0 for b in got)


class _Broken:
    cursor = None

    def __init__(self):
        self.calls = 0

    def batch(self, n):
        self.calls += 1
        if self.calls == 3:
            raise ValueError("shard 2 is truncated")
        return torch.zeros(n, 9, dtype=torch.long)


def test_an_error_on_the_thread_is_raised_in_the_loop_at_its_batch():
    ahead = Prefetcher(_Broken(), 2, slice(None), torch.device("cpu"))
    ahead.next()
    ahead.next()
    with pytest.raises(ValueError, match="truncated"):
        ahead.next()


def test_close_returns_with_a_full_queue():
    ahead = Prefetcher(_stream(), 2, slice(None), torch.device("cpu"), depth=1)
    ahead.next()
    ahead.close()
    assert not ahead._batches.thread.is_alive()


def test_ahead_runs_its_work_on_a_thread_before_the_result_is_asked_for():
    started, release = threading.Event(), threading.Event()

    def work():
        started.set()
        assert release.wait(10)
        return threading.current_thread().name

    ahead = Ahead(work, background=True, name="data-thread")
    assert started.wait(10)  # running although result() has not been called
    release.set()
    value, waited = ahead.result()
    assert value == "data-thread"
    assert waited >= 0 and ahead.work_s >= 0


def test_ahead_without_background_runs_the_work_in_the_callers_thread():
    ran = []
    ahead = Ahead(lambda: ran.append(threading.current_thread().name) or 7, background=False)
    assert ran == []  # nothing before result()
    assert ahead.result()[0] == 7
    assert ran == [threading.current_thread().name]


@pytest.mark.parametrize("background", [True, False])
def test_ahead_raises_the_works_exception_in_the_caller(background):
    def work():
        raise FileNotFoundError("shard gone")

    ahead = Ahead(work, background=background)
    with pytest.raises(FileNotFoundError, match="shard gone"):
        ahead.result()


@pytest.mark.parametrize("background", [True, False])
def test_ahead_runs_its_work_once_however_often_and_from_wherever_its_result_is_asked(background):
    """The run's held-out read asks for the stream's result on its own thread, and the main thread
    asks again (seqdsl/train/run.py: _set_up): the stream is read once, both get it."""
    runs = []
    ahead = Ahead(lambda: runs.append(1) or len(runs), background=background)
    chained = Ahead(lambda: ahead.result()[0] * 10, background=background)
    assert chained.result()[0] == 10
    assert ahead.result()[0] == 1 and ahead.result()[0] == 1
    assert runs == [1]
