"""Documents, domains and the held-out split.

A document is one record of a corpus (a blog post, a docstring, a source file) with its domain
label. The held-out split is carved by hash, unit by unit: a document is cut into *units* of at
most UNIT_CHARS characters (at a line or word end where it can; a document no longer than that is
one unit), and a unit is held out when the first 8 bytes of the SHA-256 of its UTF-8 text, read as
a fraction of 2^64, fall below `fraction`. The rule depends on the text alone, so it is the same
in every run, every setting (limited- or mixed-domain), every process and every order of the
files: a held-out unit is never trained on, and two runs that train on different domains are
evaluated on exactly the same text. Units below the document let a domain of a few long
documents (12 books) have held-out text at all; for documents of at most UNIT_CHARS characters
(most web pages and posts) a unit is the document, as a whole-document rule would have it.

What is trained on of a document are its *pieces*: the runs of consecutive units not held out,
each joined back and tokenized as one text (a document with nothing held out is one piece, so
its tokens are exactly the whole document's).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

UNIT_CHARS = 8192  # characters per held-out unit: about 2,000 tokens of English text


@dataclass(frozen=True)
class Document:
    domain: str
    text: str


def text_hash(text: str) -> int:
    """The number the held-out rule compares: the first 8 bytes of the SHA-256 of the UTF-8 text,
    big-endian."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def is_heldout(text: str, fraction: float) -> bool:
    """Whether a unit with this text belongs to the held-out split (see the module doc)."""
    return text_hash(text) < fraction * 2**64


def units(text: str) -> list[str]:
    """A document cut into units of at most UNIT_CHARS characters, each ending after the last
    newline (else space) of its second half where there is one; the units joined are the text.
    A document of at most UNIT_CHARS characters is one unit, itself."""
    out, start = [], 0
    while len(text) - start > UNIT_CHARS:
        end, half = start + UNIT_CHARS, start + UNIT_CHARS // 2
        cut = text.rfind("\n", half, end)
        if cut < 0:
            cut = text.rfind(" ", half, end)
        cut = end if cut < 0 else cut + 1
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def split_heldout(text: str, fraction: float) -> tuple[list[str], list[str]]:
    """(training pieces, held-out units) of one document: its units, each held out by its own
    hash; the runs of consecutive units that are not held out, each joined back into one piece
    (a document with nothing held out is one piece, itself)."""
    pieces: list[str] = []
    held: list[str] = []
    run: list[str] = []
    for unit in units(text):
        if is_heldout(unit, fraction):
            held.append(unit)
            if run:
                pieces.append("".join(run))
                run = []
        else:
            run.append(unit)
    if run:
        pieces.append("".join(run))
    return pieces, held


def training_pieces(documents: Iterator[Document], fraction: float) -> Iterator[str]:
    """The training pieces of `documents`, in order (what packing lays end to end)."""
    for doc in documents:
        yield from split_heldout(doc.text, fraction)[0]


class DocumentSource(Protocol):
    """A corpus: its domain names and a deterministic stream of its documents."""

    def domains(self) -> list[str]: ...

    def documents(self, domains: list[str]) -> Iterator[Document]:
        """Every document of the given domains, train and held-out alike, in a fixed order."""
        ...

    def describe(self) -> str:
        """One line naming the corpus (with a digest where it has one), for config.json."""
        ...

    def content(self) -> list[str] | None:
        """What identifies the corpus's content in stream order (digests of its files' bytes, not
        their paths), the token cache's key; None when it cannot be known without reading the
        whole stream (then nothing is cached)."""
        ...
