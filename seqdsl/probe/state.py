"""A5 / S5 word problems: state tracking, the negative control.

Each input token is an element of the permutation group (S5: all 120 permutations of 5 items,
A5: the 60 even ones); the answer at every position is the product of the prefix so far. Merrill
et al. (2024, "The illusion of state") show that a fixed-depth Transformer cannot compute it for
long sequences (the word problem of a non-solvable group is NC1-complete): selection is not state
tracking, so no selection mixer should solve it at depth 2 and a probe that says otherwise is
broken. Chance is 1/60 or 1/120.

Ids: an element's index in its group's list (permutations in lexicographic order); inputs and
answers share them. Every position is scored.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cache

import torch

from seqdsl.probe.batch import Batch, Level, Plan, ProbeError, Task, randint

Perm = tuple[int, ...]


def compose(p: Perm, q: Perm) -> Perm:
    """p then q: the permutation that sends i to q[p[i]]."""
    return tuple(q[i] for i in p)


def is_even(p: Perm) -> bool:
    inversions = sum(1 for i in range(len(p)) for j in range(i + 1, len(p)) if p[i] > p[j])
    return inversions % 2 == 0


@cache
def elements(group: str) -> tuple[Perm, ...]:
    perms = tuple(itertools.permutations(range(5)))
    return perms if group == "s5" else tuple(p for p in perms if is_even(p))


@cache
def product_table(group: str) -> torch.Tensor:
    """(n, n): table[a, b] = the id of elements[a] then elements[b]."""
    elems = elements(group)
    index = {p: i for i, p in enumerate(elems)}
    return torch.tensor([[index[compose(a, b)] for b in elems] for a in elems], dtype=torch.long)


class WordProblem(Task):
    def __init__(self, group: str):
        if group not in ("a5", "s5"):
            raise ProbeError(f"unknown group {group!r} (a5 or s5)")
        self.group = group
        self.name = group
        self.vocab = len(elements(group))

    def check_level(self, level: Level) -> None:
        if level.seq_len < 1:
            raise ProbeError(f"{self.name}: seq_len must be at least 1, got {level.seq_len}")

    def sample(self, level: Level, n: int, generator: torch.Generator) -> Batch:
        self.check_level(level)
        table = product_table(self.group)
        inputs = randint(0, self.vocab, (n, level.seq_len), generator)
        targets = torch.empty_like(inputs)
        state = inputs[:, 0]
        targets[:, 0] = state
        for t in range(1, level.seq_len):
            state = table[state, inputs[:, t]]
            targets[:, t] = state
        return Batch(inputs, targets, torch.ones_like(inputs, dtype=torch.bool))

    def answer(self, prefix: Sequence[int], level: Level) -> int:
        # composed from the permutations themselves, not from the table the generator uses
        elems = elements(self.group)
        state: Perm = tuple(range(5))
        for token in prefix:
            state = compose(state, elems[token])
        return elems.index(state)

    def chance(self, level: Level) -> float:
        return 1.0 / self.vocab

    def plan(self, seq_len: int) -> Plan:
        levels = tuple(Level.of(t) for t in sorted({max(1, seq_len // 4), max(1, seq_len // 2), seq_len}))
        return Plan(train=levels, evaluate=levels)
