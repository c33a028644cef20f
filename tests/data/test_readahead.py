"""`ReadAhead` (seqdsl/data/readahead.py): the iterator's items in its order, made on another
thread from the start; an exception raised making an item comes out where that item would
have; closing stops the thread, also with a full queue. (The training loop's use of it:
tests/train/test_prefetch.py.)"""

from __future__ import annotations

import threading
import time

import pytest

from seqdsl.data.readahead import ReadAhead


def test_the_items_come_in_order_made_on_another_thread():
    makers = []

    def items():
        for i in range(50):
            makers.append(threading.current_thread().name)
            yield i

    with ReadAhead(items(), depth=2) as reader:
        assert list(reader) == list(range(50))
        assert list(reader) == []  # exhausted stays exhausted
    assert set(makers) == {"seqdsl-read-ahead"}


def _wait_for(condition) -> None:
    deadline = time.monotonic() + 10
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_it_makes_items_before_they_are_asked_for_but_at_most_depth_ahead():
    made = []

    def items():
        for i in range(10):
            made.append(i)
            yield i

    with ReadAhead(items(), depth=3) as reader:
        _wait_for(lambda: len(made) >= 4)  # before the first is asked for: 3 queued, 1 waiting to be put
        time.sleep(0.1)
        assert len(made) == 4
        assert next(reader) == 0
        _wait_for(lambda: len(made) >= 5)
        time.sleep(0.1)
        assert len(made) == 5


def test_an_error_making_an_item_is_raised_where_that_item_would_come():
    def items():
        yield 1
        yield 2
        raise FileNotFoundError("shard gone")

    got = []
    reader = ReadAhead(items())
    with pytest.raises(FileNotFoundError, match="shard gone"):
        for item in reader:
            got.append(item)
    assert got == [1, 2]
    assert not reader.thread.is_alive()


def test_closing_stops_the_thread_with_a_full_queue():
    def endless():
        i = 0
        while True:
            yield i
            i += 1

    reader = ReadAhead(endless(), depth=2)
    assert [next(reader) for _ in range(3)] == [0, 1, 2]
    reader.close()
    assert not reader.thread.is_alive()
