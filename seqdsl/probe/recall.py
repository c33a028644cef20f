"""Recall by content: multi-query associative recall (MQAR) and induction.

Both are answered by one rule, the definition of associative recall: at a query token, predict
the token that followed its first occurrence. Both oracles are that rule, read off the prefix.

MQAR (Arora et al. 2023, Zoology): the row opens with P key-value pairs `k1 v1 ... kP vP`; the
rest of the row is filler (token 0) with Q of the keys asked again at random even offsets, each
followed by its value. Keys are ids 1..K, values K+1..vocab-1 (K = (vocab-1)//2, Zoology's
split of the vocabulary); keys, values and the queried keys are drawn without replacement in a
row. Difference from Zoology: the query slots are uniform over the free slots (Zoology draws the
gaps from a power law), and the answer stands in the row after its query (teacher forcing, as in
every task here) instead of a filler token.

Induction (Olsson et al. 2022, "repeat the bigram"): a row of random tokens where a token A
occurs once with its successor B, and again as the last input; the answer is B. A occurs
nowhere else, so the answer is unambiguous.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from seqdsl.probe.batch import Batch, Level, Plan, ProbeError, Task, randint, randperm_rows


def recall_answer(prefix: Sequence[int]) -> int:
    """The token after the first occurrence of the prefix's last token (the associative recall
    rule); -1 when that token occurs only at the end."""
    query = prefix[-1]
    first = list(prefix).index(query)
    return prefix[first + 1] if first + 1 < len(prefix) else -1


class MQAR(Task):
    name = "mqar"

    def __init__(self, vocab: int = 128):
        if vocab < 8:
            raise ProbeError(f"mqar needs a vocabulary of at least 8 tokens, got {vocab}")
        self.vocab = vocab
        self.keys = (vocab - 1) // 2  # ids 1 .. keys
        self.values = vocab - 1 - self.keys  # ids keys+1 .. vocab-1

    def check_level(self, level: Level) -> None:
        pairs, queries = level.get("pairs"), level.get("queries")
        if not 1 <= pairs <= min(self.keys, self.values):
            raise ProbeError(f"mqar: {pairs} pairs do not fit a vocabulary of {self.vocab} "
                             f"({self.keys} keys, {self.values} values)")
        slots = (level.seq_len + 1 - 2 * pairs) // 2
        if not 1 <= queries <= min(pairs, slots):
            raise ProbeError(f"mqar: {queries} queries of {pairs} pairs do not fit {level.seq_len} tokens "
                             f"(at most {max(0, min(pairs, slots))})")

    def sample(self, level: Level, n: int, generator: torch.Generator) -> Batch:
        self.check_level(level)
        T, P, Q = level.seq_len, level.get("pairs"), level.get("queries")
        keys = randperm_rows(n, self.keys, generator)[:, :P] + 1  # (n, P)
        values = randperm_rows(n, self.values, generator)[:, :P] + 1 + self.keys
        rows = torch.zeros(n, T + 1, dtype=torch.long)
        rows[:, 0:2 * P:2] = keys
        rows[:, 1:2 * P:2] = values
        asked = randperm_rows(n, P, generator)[:, :Q]  # which pairs are queried
        slots = (T + 1 - 2 * P) // 2
        where = randperm_rows(n, slots, generator)[:, :Q].sort(dim=1).values  # which free slots
        at = 2 * P + 2 * where  # row index of each query key
        rows.scatter_(1, at, keys.gather(1, asked))
        rows.scatter_(1, at + 1, values.gather(1, asked))
        mask = torch.zeros(n, T, dtype=torch.bool)
        mask.scatter_(1, at, True)  # the target at a query key's position is its value
        return Batch.from_rows(rows, mask)

    def answer(self, prefix: Sequence[int], level: Level) -> int:
        return recall_answer(prefix)

    def chance(self, level: Level) -> float:
        return 1.0 / self.values

    def plan(self, seq_len: int) -> Plan:
        levels = tuple(Level.of(seq_len, pairs=p, queries=p)
                       for p in sorted({max(1, seq_len // 16), max(1, seq_len // 8), max(1, seq_len // 4)}))
        return Plan(train=levels, evaluate=levels)


class Induction(Task):
    name = "induction"

    def __init__(self, vocab: int = 64):
        if vocab < 4:
            raise ProbeError(f"induction needs a vocabulary of at least 4 tokens, got {vocab}")
        self.vocab = vocab

    def check_level(self, level: Level) -> None:
        if level.seq_len < 4:
            raise ProbeError(f"induction needs at least 4 tokens, got {level.seq_len}")

    def sample(self, level: Level, n: int, generator: torch.Generator) -> Batch:
        self.check_level(level)
        T, V = level.seq_len, self.vocab
        a = randint(1, V, (n, 1), generator)
        # every other token is drawn from 1..V-1 without A: draw from one fewer and step over A
        rows = randint(1, V - 1, (n, T + 1), generator)
        rows += (rows >= a).long()
        b = randint(1, V - 1, (n, 1), generator)
        b += (b >= a).long()
        p = randint(0, T - 2, (n, 1), generator)  # the first A, with B after it, before the last input
        rows.scatter_(1, p, a)
        rows.scatter_(1, p + 1, b)
        rows[:, T - 1: T] = a
        rows[:, T: T + 1] = b
        mask = torch.zeros(n, T, dtype=torch.bool)
        mask[:, T - 1] = True
        return Batch.from_rows(rows, mask)

    def answer(self, prefix: Sequence[int], level: Level) -> int:
        return recall_answer(prefix)

    def chance(self, level: Level) -> float:
        return 1.0 / (self.vocab - 2)  # B is any token but 0 and A

    def plan(self, seq_len: int) -> Plan:
        return Plan(train=(Level.of(seq_len),), evaluate=tuple(Level.of(seq_len * k) for k in (1, 2, 4)))
