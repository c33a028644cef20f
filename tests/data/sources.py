"""A DocumentSource over documents held in memory, for the data tests."""

from __future__ import annotations

import hashlib
import json

from seqdsl.data.documents import Document


class MemorySource:
    """Documents in the given order; every source is a filter of one total order, as this is.
    Its content digest (the token cache's key) is the documents' own."""

    def __init__(self, docs: list[Document]):
        self.docs = docs

    def domains(self) -> list[str]:
        return sorted({d.domain for d in self.docs})

    def documents(self, domains: list[str]):
        return (d for d in self.docs if d.domain in domains)

    def describe(self) -> str:
        return "memory"

    def content(self) -> list[str]:
        return [hashlib.sha256(json.dumps([(d.domain, d.text) for d in self.docs]).encode()).hexdigest()]
