"""fla's backward takes even value widths only in 16-bit dtypes; a normalised linear attention
has 65 value columns. seqdsl/lower/fla_paths.py pads one zero column for fla and drops it again:
the result must be the unpadded computation's, column for column, output and final state."""

from __future__ import annotations

import pytest
import torch

from seqdsl.lower.backends import fla as fla_paths
from seqdsl.reference import recurrent as rec_ref

ops = pytest.importorskip("fla.ops")


def strict_simple_gla(q, k, v, g=None, scale=1.0, initial_state=None, output_final_state=True):
    """A stand-in for fla's chunk_simple_gla with fla's constraint (16-bit: even V), computed by
    the reference in float32."""
    if q.dtype in (torch.float16, torch.bfloat16):
        assert v.shape[-1] % 2 == 0, f"chunk_bwd_dv requires even K and V for {q.dtype}, got V={v.shape[-1]}"
    out, state = rec_ref.chunked_ref(q.float(), k.float(), v.float(), log_decay=g, update="additive",
                                     initial_state=initial_state)
    return out.to(q.dtype), state


@pytest.mark.parametrize("V", [65, 64])
@pytest.mark.parametrize("with_state", [False, True])
def test_an_odd_value_width_runs_padded_and_gives_the_unpadded_result(monkeypatch, V, with_state):
    monkeypatch.setattr(ops.simple_gla, "chunk_simple_gla", strict_simple_gla)
    g = torch.Generator().manual_seed(0)
    B, T, H, K = 1, 40, 2, 8
    q, k, v = (torch.randn(B, T, H, n, generator=g).bfloat16() for n in (K, K, V))
    log_decay = -torch.rand(B, T, H, generator=g) * 0.5
    S = torch.randn(B, H, K, V, generator=g) * 0.1 if with_state else None
    out, state = fla_paths._call("fla.chunk_simple_gla", q, k, v, log_decay, None, None, None, None, S)
    want_out, want_state = rec_ref.chunked_ref(q.float(), k.float(), v.float(), log_decay=log_decay,
                                               update="additive", initial_state=S)
    assert out.shape == (B, T, H, V) and state.shape == (B, H, K, V)
    torch.testing.assert_close(out.float(), want_out.to(torch.bfloat16).float(), atol=0, rtol=0)
    torch.testing.assert_close(state, want_state, atol=1e-6, rtol=1e-6)
