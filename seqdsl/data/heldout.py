"""Evaluation sets from the held-out split (see `seqdsl.data.documents.is_heldout`).

Every evaluated domain, trained on or not, is measured on its held-out documents, so a
limited-domain run and a mixed-domain run are scored on the same text. Documents are taken whole,
in the source's order, until a domain has at least `max_tokens` tokens.
"""

from __future__ import annotations

import torch

from seqdsl.data.documents import DocumentSource, is_heldout
from seqdsl.data.evalset import EvalSet
from seqdsl.errors import SeqError


def build_eval_sets(source: DocumentSource, tokenizer, domains: list[str], train_domains: list[str], *,
                    heldout: float, max_tokens: int) -> dict[str, EvalSet]:
    tokens: dict[str, list[int]] = {d: [] for d in domains}
    n_bytes: dict[str, int] = {d: 0 for d in domains}
    open_ = set(domains)
    for doc in source.documents(list(domains)):
        if doc.domain not in open_ or not is_heldout(doc.text, heldout):
            continue
        ids = tokenizer.encode(doc.text) + [tokenizer.eos_id]
        tokens[doc.domain].extend(ids)
        n_bytes[doc.domain] += len(doc.text.encode("utf-8")) + 1  # the end-of-document token is one byte
        if len(tokens[doc.domain]) >= max_tokens:
            open_.discard(doc.domain)
            if not open_:
                break
    short = [d for d in domains if len(tokens[d]) < 2]
    if short:
        raise SeqError(f"no held-out text for domain(s) {', '.join(short)}",
                       hint="raise data.heldout, or check the domain names (data.eval_domains)")
    return {d: EvalSet(d, torch.tensor(tokens[d], dtype=torch.long), n_bytes[d], d in train_domains)
            for d in domains}
