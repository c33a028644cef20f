"""Top-1 chunk selection in the lowering, on a constructed case where Exact and Approx disagree.

A one-head mixer whose projections read disjoint slices of the input (q = x[0:4], k = x[4:8],
v = x[8:12]) and whose output projection returns o, so the keys and values are set by hand.
The last query (position 19, chunk 4 of size 4) chooses among the four earlier chunks:

    chunk 1   one key scoring +5, three scoring -5  -> max +5 (Exact picks it),  mean -2.5
    chunk 2   four keys scoring +2                  -> max +2,                   mean +2 (Approx)
    chunks 0, 3 and the own chunk: keys and values 0

Values tag the chunk (channel 1 for chunk 1, channel 2 for chunk 2), so the output says which
chunk was attended.
"""

from __future__ import annotations

import pytest
import torch

import seqdsl
from seqdsl.lower.mixer import MixerModule

CHUNK, T, D = 4, 20, 12


def _mixer(score: str) -> MixerModule:
    spec = seqdsl.loads(f"mixer m {{ heads = 1  head_dim = 4  select = top(1, over=chunk({CHUNK}), "
                        f"score={score}) }}").program.mixer("m")
    module = MixerModule(spec, D, context=T).double()
    eye = torch.eye(D, dtype=torch.float64)
    with torch.no_grad():
        module.q_proj.weight.copy_(eye[0:4])
        module.k_proj.weight.copy_(eye[4:8])
        module.v_proj.weight.copy_(eye[8:12])
        module.o_proj.weight.copy_(eye[:, 8:12])  # o lands in channels 8..11 of the output
    return module


def _constructed_input() -> torch.Tensor:
    x = torch.zeros(1, T, D, dtype=torch.float64)
    x[0, :, 0] = 1.0  # every query is e_0; scale 1/sqrt(4) halves the scores
    x[0, 4:8, 4] = torch.tensor([10.0, -10.0, -10.0, -10.0])  # chunk 1: scores +5, -5, -5, -5
    x[0, 4:8, 8 + 1] = 1.0  # chunk 1's values: channel 1
    x[0, 8:12, 4] = 4.0  # chunk 2: scores +2
    x[0, 8:12, 8 + 2] = 1.0  # chunk 2's values: channel 2
    return x


@pytest.mark.parametrize("score, picked, other", [("max", 1, 2), ("mean", 2, 1)])
def test_exact_and_approx_pick_different_chunks(score, picked, other):
    with torch.no_grad():
        out, _ = _mixer(score)(_constructed_input())
    o = out[0, -1, 8:12]  # the last query's output, value channels
    assert (T - 1) // CHUNK == 4  # four candidate chunks
    assert o[picked] > 0.1, f"score={score} did not attend chunk {picked}: {o.tolist()}"
    assert o[other] == 0, f"score={score} attended chunk {other} as well: {o.tolist()}"
