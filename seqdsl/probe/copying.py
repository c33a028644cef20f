"""Copying a random string, and selective copying.

Copy (Jelassi et al. 2024, "Repeat after me"): `s1 .. sL SEP s1 .. sL`; the L tokens after the
separator are the answers. Tokens are drawn with replacement, so a repeated token does not say
what comes next: a model must find its place in the string, not just the last occurrence of
the current token. A fixed-size state has to hold all L tokens at once.

Selective copying (Gu & Dao 2023, Mamba): L content tokens scattered among blanks in a region of
seq_len - L positions, then `SEP` and the content tokens in order. Where they stand is random,
so a fixed time-invariant filter cannot pick them out: selection by content is needed.

Ids: 0 blank, 1 separator, content tokens 2 .. vocab-1.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from seqdsl.probe.batch import Batch, Level, Plan, ProbeError, Task, randint, randperm_rows

BLANK, SEP = 0, 1


class _Copying(Task):
    """What both copying tasks share: content tokens 2 .. vocab-1, each answer one of them."""

    def __init__(self, vocab: int = 32):
        if vocab < 4:
            raise ProbeError(f"{self.name} needs a vocabulary of at least 4 tokens, got {vocab}")
        self.vocab = vocab

    def chance(self, level: Level) -> float:
        return 1.0 / (self.vocab - 2)


class Copy(_Copying):
    name = "copy"

    def check_level(self, level: Level) -> None:
        if level.seq_len != 2 * level.get("length") or level.get("length") < 1:
            raise ProbeError(f"copy: a string of {level.get('length')} tokens is copied in "
                             f"{2 * level.get('length')} tokens, not {level.seq_len}")

    def sample(self, level: Level, n: int, generator: torch.Generator) -> Batch:
        self.check_level(level)
        L = level.get("length")
        s = randint(2, self.vocab, (n, L), generator)
        rows = torch.cat([s, torch.full((n, 1), SEP), s], dim=1)  # (n, 2L + 1)
        mask = torch.zeros(n, 2 * L, dtype=torch.bool)
        mask[:, L:] = True  # from the separator on, each target is the next token of the string
        return Batch.from_rows(rows, mask)

    def answer(self, prefix: Sequence[int], level: Level) -> int:
        sep = list(prefix).index(SEP)
        return prefix[len(prefix) - 1 - sep]  # i tokens after SEP: the (i+1)-th token of the string

    def plan(self, seq_len: int) -> Plan:
        levels = tuple(Level.of(2 * L, length=L) for L in sorted({max(1, seq_len // 8), max(1, seq_len // 4),
                                                                  max(1, seq_len // 2)}))
        return Plan(train=levels, evaluate=levels)


class SelectiveCopy(_Copying):
    name = "selective_copy"

    def check_level(self, level: Level) -> None:
        L = level.get("tokens")
        if not 1 <= L <= (level.seq_len - 1) // 2:
            raise ProbeError(f"selective_copy: {L} tokens do not fit {level.seq_len} positions "
                             f"(at most {(level.seq_len - 1) // 2})")

    def sample(self, level: Level, n: int, generator: torch.Generator) -> Batch:
        self.check_level(level)
        T, L = level.seq_len, level.get("tokens")
        region = T - L  # blanks and content, then SEP, then L answers: T + 1 tokens in all
        content = randint(2, self.vocab, (n, L), generator)
        where = randperm_rows(n, region, generator)[:, :L].sort(dim=1).values
        rows = torch.full((n, T + 1), BLANK, dtype=torch.long)
        rows.scatter_(1, where, content)
        rows[:, region] = SEP
        rows[:, region + 1:] = content
        mask = torch.zeros(n, T, dtype=torch.bool)
        mask[:, region:] = True
        return Batch.from_rows(rows, mask)

    def answer(self, prefix: Sequence[int], level: Level) -> int:
        sep = list(prefix).index(SEP)
        content = [x for x in prefix[:sep] if x != BLANK]
        return content[len(prefix) - 1 - sep]

    def plan(self, seq_len: int) -> Plan:
        levels = tuple(Level.of(seq_len, tokens=L) for L in sorted({max(1, seq_len // 16), max(1, seq_len // 8),
                                                                    max(1, seq_len // 4)}))
        return Plan(train=levels, evaluate=levels)
