"""An iterator's items made on a thread of their own, a few ahead of the consumer.

The token cache's build reads documents (Python: decompressing, parsing, the held-out split) and
tokenizes them (Rust threads, the GIL released): one after the other, the cores sit idle while
the next batch is read. `read_ahead` reads the next batches while the current one is tokenized.
The items and their order are the iterator's; an exception raised making an item is raised in
the consumer where that item would have come; a consumer that stops early stops the thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error


def read_ahead(items: Iterator[T], depth: int = 2, *, name: str = "seqdsl-read-ahead") -> Iterator[T]:
    """The items of `items`, made on a thread at most `depth` ahead of the consumer."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as err:  # raised in the consumer, at the item it was making
            put(_Raised(err))

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()
