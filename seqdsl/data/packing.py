"""Packing documents into fixed-length training sequences, with a resumable cursor.

Shape legend: T seq_len; a packed sequence is T + 1 tokens (inputs are its first T, targets its
last T).

The training pieces of the documents (held-out units removed, seqdsl/data/documents.py: a
document with nothing held out is one piece) are tokenized, each followed by the end-of-document
token, and laid end to end in the source's fixed order (several training domains interleaved in
proportion to their size: seqdsl/data/mixing.py); sequence i is tokens
[iT, iT + T + 1) of that stream, so consecutive sequences share one token and every token is a
target exactly once. When the documents run out, the stream starts again (the next epoch).

The cursor is where the next sequence starts: (epoch, index of the piece among the training
pieces of that epoch, token offset inside it). It is three integers, saved in every
checkpoint; resuming re-reads the documents before it without tokenizing them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import numpy as np
import torch

from seqdsl.data.documents import Document, split_heldout, training_pieces
from seqdsl.data.mixing import mixed_order, piece_bytes
from seqdsl.errors import SeqError


@dataclass(frozen=True)
class Cursor:
    epoch: int = 0
    doc: int = 0
    offset: int = 0

    def to_json(self) -> dict:
        return asdict(self)


class PackedSequences:
    """Endless packed sequences of (T + 1) tokens from `documents()` (called once per epoch)."""

    def __init__(self, documents: Callable[[], Iterator[Document]], encode: Callable[[str], list[int]],
                 eos_id: int, seq_len: int, heldout: float, cursor: Cursor = Cursor(), *,
                 mixed: bool | None = None):
        self.documents, self.encode, self.eos_id = documents, encode, eos_id
        self.seq_len, self.heldout = seq_len, heldout
        # several training domains (interleaved)? False skips the pass that finds out; None makes it
        self.mixed = mixed
        self._stream_order: tuple[list[str], list[int]] | None = None  # domains, a label per piece
        self.cursor = cursor  # where the next sequence starts
        self._segments: deque[list] = deque()  # [epoch, doc index, start offset, tokens]
        self._buffered = 0  # tokens in _segments from their start offsets on
        self._resume_offset = cursor.offset  # applies to the first document read, once
        self._docs = self._training_docs(cursor)

    def _training_docs(self, start: Cursor) -> Iterator[tuple[int, int, list[int]]]:
        epoch, skip = start.epoch, start.doc
        while True:
            index = -1
            for index, piece in enumerate(self._epoch_pieces()):
                if index < skip:  # resuming: the pieces before the cursor are read, not tokenized
                    continue
                yield epoch, index, self.encode(piece) + [self.eos_id]
            if index < 0:
                raise SeqError("no training documents: every document of the training domains is held out "
                               "or the domains are empty", hint="check data.train_domains and data.heldout")
            epoch, skip = epoch + 1, 0

    def _epoch_pieces(self) -> Iterator[str]:
        """One epoch's training pieces in stream order: the source's, with several domains
        interleaved (seqdsl/data/mixing.py), one reader per domain following the order, so no
        epoch is held in memory."""
        if self.mixed is not False and self._stream_order is None:
            self._stream_order = self._mixed_labels()
        if self._stream_order is None or len(self._stream_order[0]) <= 1:
            yield from training_pieces(self.documents(), self.heldout)
            return
        names, labels = self._stream_order
        readers = [self._pieces_of(name) for name in names]
        for label in labels:
            yield next(readers[label])

    def _mixed_labels(self) -> tuple[list[str], list[int]]:
        """(the domains, each piece's domain in stream order), from one pass over every piece's
        domain and size; made once per stream, since the order is the same every epoch."""
        numbers: dict[str, int] = {}
        domains, sizes = [], []
        for doc in self.documents():
            for piece in split_heldout(doc.text, self.heldout)[0]:
                domains.append(numbers.setdefault(doc.domain, len(numbers)))
                sizes.append(piece_bytes(piece))
        order = mixed_order(np.array(domains, dtype=np.int64), np.array(sizes, dtype=np.int64))
        return list(numbers), [domains[i] for i in order]

    def _pieces_of(self, domain: str) -> Iterator[str]:
        return training_pieces((doc for doc in self.documents() if doc.domain == domain), self.heldout)

    def _fill(self, need: int) -> None:
        while self._buffered < need:
            epoch, index, tokens = next(self._docs)
            offset, self._resume_offset = self._resume_offset, 0
            self._segments.append([epoch, index, offset, tokens])
            self._buffered += len(tokens) - offset

    def next(self) -> torch.Tensor:
        """The next sequence, (T + 1,) int64; advances the cursor by T tokens."""
        T = self.seq_len
        self._fill(T + 1)
        out, need = [], T + 1
        for _epoch, _index, start, tokens in self._segments:
            take = tokens[start: start + need]
            out.extend(take)
            need -= len(take)
            if need == 0:
                break
        advance = T
        while advance:
            seg = self._segments[0]
            left = len(seg[3]) - seg[2]
            if left > advance:
                seg[2] += advance
                self._buffered -= advance
                advance = 0
            else:
                self._segments.popleft()
                self._buffered -= left
                advance -= left
        self._fill(1)
        epoch, index, start, _ = self._segments[0]
        self.cursor = Cursor(epoch, index, start)
        return torch.tensor(out, dtype=torch.long)

    def batch(self, n: int) -> torch.Tensor:
        """The next n sequences, (n, T + 1)."""
        return torch.stack([self.next() for _ in range(n)])
