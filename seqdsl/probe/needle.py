"""Needle (passkey) retrieval: find a key hidden in filler, at 1x to 4x the training length.

A row is filler with the needle `KEY d1 .. dD` inserted at a uniformly random depth, and at the
end `QUERY d1 .. dD`; the D digits after QUERY are the answers (Mohtashami & Jaggi 2023's passkey
test, in tokens). The model trains at one length and is evaluated at 1, 2, 3 and 4 times it:
what is measured is whether retrieval survives a longer haystack, the mixer's reach, not how
well it learnt the task.

The filler is random tokens (ids 0 .. filler-1), or, when a text is given, windows of held-out
text as UTF-8 bytes (ids 0..255) at random offsets: `heldout_text` reads them from any
`DocumentSource` (seqdsl/data/documents.py) by the same held-out rule training uses, so a model
trained on that corpus never saw them. The marker and digit tokens sit above the filler's ids,
so the filler never contains them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from seqdsl.probe.batch import Batch, Level, Plan, ProbeError, Task, randint

DIGITS = 10


class Needle(Task):
    name = "needle"

    def __init__(self, filler: int = 32, *, text: Tensor | None = None, text_name: str | None = None):
        if text is not None:
            filler = 256  # bytes
        if filler < 1:
            raise ProbeError(f"needle needs at least one filler token, got {filler}")
        self.text = text
        self.text_name = text_name  # says where the text came from, in records
        self.key, self.query = filler, filler + 1
        self.digit0 = filler + 2
        self.vocab = filler + 2 + DIGITS

    def check_level(self, level: Level) -> None:
        D = level.get("digits")
        filler = level.seq_len - 1 - 2 * D
        if D < 1 or filler < 0:
            raise ProbeError(f"needle: {D} digits need at least {2 * D + 1} tokens, got {level.seq_len}")
        if self.text is not None and self.text.numel() < filler:
            raise ProbeError(f"needle: the text ({self.text.numel():,} bytes) is shorter than the "
                             f"{filler:,} filler tokens of seq_len {level.seq_len}")

    def sample(self, level: Level, n: int, generator: torch.Generator) -> Batch:
        self.check_level(level)
        T, D = level.seq_len, level.get("digits")
        filler = T - 1 - 2 * D  # filler, needle (1 + D), query (1 + D): T + 1 tokens
        if self.text is None:
            hay = randint(0, self.key, (n, filler), generator)
        else:
            start = randint(0, self.text.numel() - filler + 1, (n, 1), generator)
            hay = self.text[start + torch.arange(filler)].long()
        digits = randint(self.digit0, self.digit0 + DIGITS, (n, D), generator)
        needle = torch.cat([torch.full((n, 1), self.key), digits], dim=1)
        depth = randint(0, filler + 1, (n,), generator)
        rows = torch.empty(n, T + 1, dtype=torch.long)
        for b in range(n):  # a different cut per row; n is small next to the model's work
            d = int(depth[b])
            rows[b, : T - D] = torch.cat([hay[b, :d], needle[b], hay[b, d:]])
        rows[:, T - D] = self.query
        rows[:, T - D + 1:] = digits
        mask = torch.zeros(n, T, dtype=torch.bool)
        mask[:, T - D:] = True
        return Batch.from_rows(rows, mask)

    def answer(self, prefix: Sequence[int], level: Level) -> int:
        prefix = list(prefix)
        key, query = prefix.index(self.key), prefix.index(self.query)
        return prefix[key + 1 + (len(prefix) - 1 - query)]

    def chance(self, level: Level) -> float:
        return 1.0 / DIGITS

    def plan(self, seq_len: int) -> Plan:
        digits = 4
        return Plan(train=(Level.of(seq_len, digits=digits),),
                    evaluate=tuple(Level.of(seq_len * k, digits=digits) for k in (1, 2, 3, 4)))


def heldout_text(source, domains: list[str], *, fraction: float, max_bytes: int) -> Tensor:
    """Up to `max_bytes` of the held-out units of `domains` (seqdsl/data/documents.py's rule, as
    training holds them out) as UTF-8 byte ids, documents joined by newlines."""
    from seqdsl.data.documents import split_heldout

    out = bytearray()
    for doc in source.documents(domains):
        for unit in split_heldout(doc.text, fraction)[1]:
            out += unit.encode("utf-8") + b"\n"
        if len(out) >= max_bytes:
            break
    del out[max_bytes:]
    # a bytearray is writable, so torch can share it without a copy or a warning
    return torch.frombuffer(out, dtype=torch.uint8).long() if out else torch.zeros(0, dtype=torch.long)

def load_text(where: str, *, max_bytes: int = 1 << 20) -> Tensor:
    """The needle's filler text named on the command line: `builtin` (the builtin corpus's Python
    manual, prose), `builtin:DOMAIN`, or data files / folders as `seqdsl train` reads them (every
    domain); its held-out units only (the default held-out fraction of a run config)."""
    from seqdsl.errors import did_you_mean
    from seqdsl.run.config import DataConfig

    if where == "builtin" or where.startswith("builtin:"):
        from seqdsl.data.builtin import BuiltinSource

        source = BuiltinSource()
        domain = where.partition(":")[2] or "manual"
        if domain not in source.domains():
            raise ProbeError(f"unknown builtin domain `{domain}`",
                             hint=did_you_mean(domain, source.domains()) or f"domains: {', '.join(source.domains())}")
        domains = [domain]
    else:
        from seqdsl.data.shards import ShardSource

        source = ShardSource([where])
        domains = source.domains()
    text = heldout_text(source, domains, fraction=DataConfig().heldout, max_bytes=max_bytes)
    if text.numel() == 0:
        raise ProbeError(f"no held-out text in {where}")
    return text
