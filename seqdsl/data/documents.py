"""Documents, domains and the held-out split.

A document is one record of a corpus (a blog post, a docstring, a source file) with its domain
label. The held-out split is carved by document hash: a document is held out when the first 8
bytes of the SHA-256 of its UTF-8 text, read as a fraction of 2^64, fall below `fraction`. The
rule depends on the text alone, so it is the same in every run, every setting (limited- or
mixed-domain), every process and every order of the files: a held-out document is never trained
on, and two runs that train on different domains are evaluated on exactly the same text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Document:
    domain: str
    text: str


def is_heldout(text: str, fraction: float) -> bool:
    """Whether a document with this text belongs to the held-out split (see the module doc)."""
    h = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
    return h < fraction * 2**64


class DocumentSource(Protocol):
    """A corpus: its domain names and a deterministic stream of its documents."""

    def domains(self) -> list[str]: ...

    def documents(self, domains: list[str]) -> Iterator[Document]:
        """Every document of the given domains, train and held-out alike, in a fixed order."""
        ...

    def describe(self) -> str:
        """One line naming the corpus (with a digest where it has one), for config.json."""
        ...
