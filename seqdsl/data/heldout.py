"""Evaluation sets from the held-out split (seqdsl/data/documents.py: units of at most
UNIT_CHARS characters, held out by hash).

Every evaluated domain, trained on or not, is measured on its held-out units, so a limited-domain
run and a mixed-domain run are scored on the same text; a domain of a few long documents (books)
has held-out units too. `max_tokens` is a budget: held-out units are taken in the source's order
(each with its end-of-document token) and the one that crosses the budget is cut, so a domain
holds exactly min(max_tokens, its held-out tokens) tokens. A domain's set depends only on its own
documents and their order, never on which other domains are evaluated.

Bits per byte need the bytes the tokens stand for: a whole unit counts its text's UTF-8 bytes
plus one for its end-of-document token; the cut one counts the UTF-8 bytes of the text its kept
tokens decode to (`tokenizer.text_bytes`), not the whole unit's.
"""

from __future__ import annotations

import torch

from seqdsl.data.documents import DocumentSource, split_heldout
from seqdsl.data.evalset import EvalSet
from seqdsl.errors import SeqError


class _DomainText:
    """The held-out tokens of one domain, filled up to a budget, and the bytes they stand for."""

    def __init__(self, budget: int):
        self.budget = budget
        self.tokens: list[int] = []
        self.n_bytes = 0

    @property
    def full(self) -> bool:
        return len(self.tokens) >= self.budget

    def add(self, text: str, tokenizer) -> None:
        """Append one held-out unit and its end-of-document token, cut to the budget's room."""
        ids = tokenizer.encode(text) + [tokenizer.eos_id]
        room = self.budget - len(self.tokens)
        if len(ids) <= room:
            self.tokens.extend(ids)
            self.n_bytes += len(text.encode("utf-8")) + 1  # the end-of-document token is one byte
            return
        kept = ids[:room]  # text tokens only: the end-of-document token is the one left out
        self.tokens.extend(kept)
        self.n_bytes += tokenizer.text_bytes(kept)


def build_eval_sets(source: DocumentSource, tokenizer, domains: list[str], train_domains: list[str], *,
                    heldout: float, max_tokens: int) -> dict[str, EvalSet]:
    texts = {d: _DomainText(max_tokens) for d in domains}
    open_ = set(domains)
    for doc in source.documents(list(domains)):
        if doc.domain not in open_:
            continue
        for unit in split_heldout(doc.text, heldout)[1]:
            texts[doc.domain].add(unit, tokenizer)
            if texts[doc.domain].full:
                break
        if texts[doc.domain].full:
            open_.discard(doc.domain)
            if not open_:
                break
    short = [d for d in domains if len(texts[d].tokens) < 2]
    if short:
        raise SeqError(f"no held-out text for domain(s) {', '.join(short)}",
                       hint="raise data.heldout, or check the domain names (data.eval_domains)")
    return {d: EvalSet(d, torch.tensor(texts[d].tokens, dtype=torch.long), texts[d].n_bytes, d in train_domains)
            for d in domains}
