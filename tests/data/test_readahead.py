"""`read_ahead` (seqdsl/data/readahead.py): the iterator's items in its order, made on another
thread; an exception raised making an item comes out where that item would have; a consumer
that stops early stops the thread."""

from __future__ import annotations

import threading
import time

import pytest

from seqdsl.data.readahead import read_ahead


def test_the_items_come_in_order_made_on_another_thread():
    makers = []

    def items():
        for i in range(50):
            makers.append(threading.current_thread().name)
            yield i

    assert list(read_ahead(items(), depth=2)) == list(range(50))
    assert set(makers) == {"seqdsl-read-ahead"}


def test_it_makes_items_before_they_are_asked_for_but_at_most_depth_ahead():
    made = []

    def items():
        for i in range(10):
            made.append(i)
            yield i

    reader = read_ahead(items(), depth=3)
    assert next(reader) == 0
    deadline = time.monotonic() + 10
    while len(made) < 5 and time.monotonic() < deadline:  # the one taken, 3 queued, 1 waiting to be put
        time.sleep(0.01)
    time.sleep(0.1)
    assert len(made) == 5
    reader.close()


def test_an_error_making_an_item_is_raised_where_that_item_would_come():
    def items():
        yield 1
        yield 2
        raise FileNotFoundError("shard gone")

    got = []
    with pytest.raises(FileNotFoundError, match="shard gone"):
        for item in read_ahead(items()):
            got.append(item)
    assert got == [1, 2]


def test_a_consumer_that_stops_early_stops_the_thread():
    def endless():
        i = 0
        while True:
            yield i
            i += 1

    before = threading.active_count()
    reader = read_ahead(endless(), depth=2)
    assert [next(reader) for _ in range(3)] == [0, 1, 2]
    reader.close()  # what a `for` loop left by an exception or a break does
    assert threading.active_count() == before
