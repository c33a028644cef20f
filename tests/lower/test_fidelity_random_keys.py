"""`relation = random_keys(seed)` draws one frozen table per layer and head (issue 8, item 3)."""

from __future__ import annotations

import math

import torch

import seqdsl
from seqdsl.lower.lm import build_lm

SPEC = """
mixer rk { heads = 2  head_dim = 64  relation = random_keys(seed=7) }
model m { preset = "tiny"  layers = 3  mixer = rk }
"""


def _tables(spec: str = SPEC) -> list[torch.Tensor]:
    lm = build_lm(seqdsl.loads(spec).program)
    return [block.mixer.random_keys for block in lm.blocks]


def test_every_layer_and_head_has_its_own_table():
    tables = _tables()
    assert len(tables) == 3
    for a in range(3):
        heads = tables[a].unbind(dim=1)  # (context, Dk) per head
        assert not torch.equal(heads[0], heads[1])
        for b in range(a + 1, 3):
            assert not torch.equal(tables[a], tables[b]), (a, b)


def test_tables_are_deterministic_and_follow_the_seed():
    first, again = _tables(), _tables()
    assert all(torch.equal(x, y) for x, y in zip(first, again))
    other = _tables(SPEC.replace("seed=7", "seed=8"))
    assert not any(torch.equal(x, y) for x, y in zip(first, other))


def test_layer_zero_draws_the_plain_seed():
    """Layer 0 keeps the table a single-layer model always had: N(0, 1/Dk) from `seed`."""
    table = _tables()[0]
    context, H, Dk = table.shape
    g = torch.Generator().manual_seed(7)
    assert torch.equal(table, torch.randn(context, H, Dk, generator=g) / math.sqrt(Dk))
