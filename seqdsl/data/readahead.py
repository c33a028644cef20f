"""An iterator's items made on a thread of their own, a few ahead of the consumer.

The token cache's build reads documents (Python: decompressing, parsing, the held-out split) and
tokenizes them (Rust threads, the GIL released): one after the other, the cores sit idle while
the next batch is read; read ahead, the next batches are read while the current one is
tokenized. The training loop's batches are packed and pinned the same way
(seqdsl/train/prefetch.py). The items and their order are the iterator's; the thread starts at
once (the first item is made before it is asked for); an exception raised making an item is
raised in the consumer where that item would have come; `close()` (or leaving the `with` block)
stops the thread within one item (and 0.1 s) and waits for it, so none is left half-made on a
thread the interpreter would kill at exit.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
_DONE = object()


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error


class ReadAhead(Generic[T]):
    """The items of `items`, made on a thread at most `depth` ahead of the consumer."""

    def __init__(self, items: Iterator[T], depth: int = 2, *, name: str = "seqdsl-read-ahead"):
        self._items = items
        self._ready: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._finished = False
        self.thread = threading.Thread(target=self._produce, name=name, daemon=True)
        self.thread.start()

    def _produce(self) -> None:
        try:
            for item in self._items:
                if not self._put(item):
                    return
            self._put(_DONE)
        except BaseException as err:  # raised in the consumer, at the item it was making
            self._put(_Raised(err))

    def _put(self, item) -> bool:
        """Queue `item`, giving up as soon as the consumer closes (it may never take another)."""
        while not self._stop.is_set():
            try:
                self._ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> ReadAhead[T]:
        return self

    def __next__(self) -> T:
        if self._finished:
            raise StopIteration
        item = self._ready.get()
        if item is _DONE:
            self._finished = True
            raise StopIteration
        if isinstance(item, _Raised):
            self._finished = True
            self.close()
            raise item.error
        return item

    def close(self) -> None:
        self._stop.set()
        self.thread.join()

    def __enter__(self) -> ReadAhead[T]:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
