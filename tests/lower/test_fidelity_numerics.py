"""Long-context numerics of the softmax family's score biases (issue 8, item 1).

The decayed softmax's bias sum_{j < s <= i} log a_s, ALiBi's -m (i - j) and the positional
table must be computed without cancellation and, in a float64 model, in float64. The oracles here
are independent of the lowering: parameters are read from the module and every step is redone in
float64, with the decay bias summed exactly in integers (each float64 is an integer multiple of
2^-1074) and rounded once.

Shapes: B batch, T tokens, H heads, D head dim.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import seqdsl
from seqdsl.ir import schedules
from seqdsl.lower.mixer import MixerModule
from seqdsl.lower.stages import segment_sums
from seqdsl.lower.paths import set_path
from seqdsl.reference.attention import alibi_bias, attention_ref
from tests.oracles.decayed_softmax import decayed_softmax_oracle, exact_segment_sums

D_MODEL = 128
DECAYED = "mixer f { heads = 2  head_dim = 64  decay = data_dependent(scalar) }"
# 16 heads: slopes 2^(-h/2), not all powers of two (with 2 heads float32 would be exact too)
ALIBI = "mixer f { heads = 16  head_dim = 8  position = alibi }"
POSITIONAL = "mixer f { heads = 2  head_dim = 64  relation = positional }"


def _module(spec: str, dtype: torch.dtype, *, context: int = 2048) -> MixerModule:
    torch.manual_seed(0)
    m = MixerModule(seqdsl.loads(spec).program.mixer("f"), D_MODEL, context=context).to(dtype)
    if hasattr(m, "dt_proj"):
        with torch.no_grad():  # the set-up: dt bias 0, so log decays are about -5 a step
            m.dt_proj.bias.zero_()
    return m


def _split_difference(m: MixerModule, x: torch.Tensor, split: int, steps: int = 0) -> float:
    """max |full forward - forward in pieces|: the first `split` tokens, then the rest but the
    last `steps` tokens, then those one at a time (decoding)."""
    with torch.no_grad():
        full, _ = m(x)
        T = x.shape[1]
        pieces, state = [], None
        cuts = [0, split, T - steps] + list(range(T - steps + 1, T + 1))
        for a, b in zip(cuts, cuts[1:]):
            if b > a:
                out, state = m(x[:, a:b], state)
                pieces.append(out)
        return (full - torch.cat(pieces, dim=1)).abs().max().item()


# --- segment sums ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_segment_sums_error_is_relative_to_each_entry(dtype):
    """Each entry is within (i - j) eps of the exact segment sum, relative to itself, however
    large the cumulative sum before it (here -5 a step: -2500 at the end)."""
    torch.manual_seed(1)
    T = 500
    log_decay = -(5.0 + torch.rand(1, T, dtype=torch.float64)).to(dtype)
    got = segment_sums(log_decay)[0].double()
    exact = exact_segment_sums(log_decay.double())[0]
    eps = torch.finfo(dtype).eps
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    bound = ((i - j).clamp(min=0) * eps * exact.abs()).to(torch.float64)
    assert segment_sums(log_decay).dtype == dtype
    assert torch.all((got - exact).abs() <= bound), float(((got - exact).abs() - bound).max())


def test_segment_sums_are_zero_on_and_above_the_diagonal():
    log_decay = -torch.rand(2, 3, 7, dtype=torch.float64)
    sums = segment_sums(log_decay)
    assert sums.shape == (2, 3, 7, 7)
    assert torch.all(sums.triu() == 0)
    assert torch.allclose(sums[..., 4, 1], log_decay[..., 2:5].sum(-1))


# --- the decayed softmax -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["sdpa", "reference"])
def test_decayed_softmax_float64_matches_exact_oracle(path):
    m = _module(DECAYED, torch.float64)
    if path == "reference":
        set_path(m, "reference")
    x = torch.randn(1, 300, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        out, _ = m(x)
    ref = decayed_softmax_oracle(m, x)
    # was 1.1e-6 (bias from a float32 cumsum, cum_i - cum_j)
    assert ((out - ref).norm() / ref.norm()).item() < 1e-13


def test_decayed_softmax_float32_is_as_accurate_as_plain_attention():
    """float32 can only be at float32 round-off (plain attention: ~3e-7 here)."""
    m = _module(DECAYED, torch.float32)
    x = torch.randn(1, 1024, D_MODEL)
    with torch.no_grad():
        out, _ = m(x)
    m64 = _module(DECAYED, torch.float64)  # same seed: the float64 image of the same weights
    with torch.no_grad():
        for p32, p64 in zip(m.parameters(), m64.parameters()):
            p64.copy_(p32.double())
        ref, _ = m64(x.double())
    # was 3.1e-6 at T = 1024 (the cancellation grows with T)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-6


@pytest.mark.parametrize("T, split", [(300, 150), (1024, 511)])
def test_decayed_softmax_float64_split_equals_full(T, split):
    m = _module(DECAYED, torch.float64)
    x = torch.randn(1, T, D_MODEL, dtype=torch.float64)
    # was 6.2e-6 at T = 300 and 3.7e-5 at T = 1024
    assert _split_difference(m, x, split, steps=3) < 1e-12


@pytest.mark.slow
def test_decayed_softmax_float64_split_equals_full_at_4096():
    m = _module(DECAYED, torch.float64, context=4096)
    x = torch.randn(1, 4096, D_MODEL, dtype=torch.float64)
    assert _split_difference(m, x, 2047) < 1e-12  # was 2.7e-4


def test_decayed_softmax_carries_its_last_bias_row_in_the_bias_dtype():
    m = _module(DECAYED, torch.bfloat16)
    with torch.no_grad():
        _, state = m(torch.randn(1, 5, D_MODEL, dtype=torch.bfloat16))
        bias, row = m.mixing.score_bias(m, torch.randn(1, 2, D_MODEL, dtype=torch.bfloat16), state, 7)
    assert state.decay_row.dtype == torch.float32 and state.decay_row.shape == (1, 2, 5)
    # only the two new queries' rows are built, over all 7 keys
    assert bias.dtype == torch.float32 and bias.shape == (1, 2, 2, 7) and row.shape == (1, 2, 7)


@pytest.mark.parametrize("cuts", [(0, 1, 2, 3), (0, 7, 8), (0, 5, 9, 10, 13)])
def test_segment_sums_of_new_rows_equal_the_last_rows_of_the_full_bias(cuts):
    """In float64, built piece by piece from the previous call's last row, the rows of the new
    positions are the same numbers as the matching rows of the full (L, L) bias: the same terms
    added in the same order."""
    torch.manual_seed(2)
    L = cuts[-1]
    log_decay = -(5.0 + torch.rand(2, 3, L, dtype=torch.float64))
    full = segment_sums(log_decay)
    row = None
    for a, b in zip(cuts, cuts[1:]):
        rows = segment_sums(log_decay[..., a:b], row)
        assert rows.shape == (2, 3, b - a, b)
        assert torch.equal(rows, full[..., a:b, :b])
        row = rows[..., -1, :]


def test_segment_sums_in_float32_pieces_keep_the_per_entry_error_bound():
    """In float32 the carried row is rounded once per call (the full bias accumulates its cumsum
    in double on CPU), so pieces are not bit-equal to the full bias; each entry still stays
    within (i - j) eps of the exact segment sum, relative to itself."""
    torch.manual_seed(2)
    cuts = (0, 300, 301, 302, 450, 451, 500)
    log_decay = -(5.0 + torch.rand(1, cuts[-1], dtype=torch.float64))
    exact = exact_segment_sums(log_decay)[0]
    row, pieces = None, []
    for a, b in zip(cuts, cuts[1:]):
        rows = segment_sums(log_decay[..., a:b].float(), row)
        pieces.append(F.pad(rows, (0, cuts[-1] - b)))
        row = rows[..., -1, :]
    got = torch.cat(pieces, dim=-2)[0].double()
    i, j = torch.meshgrid(torch.arange(cuts[-1]), torch.arange(cuts[-1]), indexing="ij")
    bound = (i - j).clamp(min=0) * torch.finfo(torch.float32).eps * exact.abs()
    assert torch.all((got - exact).abs() <= bound), float(((got - exact).abs() - bound).max())


def test_segment_sums_of_one_new_row_agree_with_an_exact_sum():
    """Independent of the full bias: the decoding row against integer-exact segment sums."""
    torch.manual_seed(3)
    log_decay = -(5.0 + torch.rand(1, 40, dtype=torch.float64))
    previous = segment_sums(log_decay[:, :39])[:, -1]
    row = segment_sums(log_decay[:, 39:], previous)[:, 0]
    exact = exact_segment_sums(log_decay)[0, -1]
    assert ((row[0] - exact).abs() <= 40 * torch.finfo(torch.float64).eps * exact.abs()).all()


def test_a_decoding_step_builds_one_bias_row_not_the_square():
    m = _module(DECAYED, torch.float64)
    seen = []
    real = segment_sums

    def spy(log_decay, previous_row=None):
        out = real(log_decay, previous_row)
        seen.append(tuple(out.shape[-2:]))
        return out

    import seqdsl.lower.stages as stages

    x = torch.randn(1, 9, D_MODEL, dtype=torch.float64)
    with torch.no_grad(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(stages, "segment_sums", spy)
        _, state = m(x[:, :8])
        m(x[:, 8:], state)
    assert seen == [(8, 8), (1, 9)]


# --- ALiBi and positional biases ---------------------------------------------------------------


def _projections(m: MixerModule, x: torch.Tensor):
    B, T, _ = x.shape
    W = {name: p.detach().double() for name, p in m.named_parameters()}
    q = (x @ W["q_proj.weight"].T).view(B, T, m.plan.layout.heads, m.plan.layout.key_dim) if "q_proj.weight" in W else None
    k = (x @ W["k_proj.weight"].T).view(B, T, m.plan.layout.heads, m.plan.layout.key_dim) if "k_proj.weight" in W else None
    v = (x @ W["v_proj.weight"].T).view(B, T, m.plan.layout.heads, m.plan.layout.head_dim)
    return W, q, k, v


@pytest.mark.parametrize("path", ["sdpa", "reference"])
def test_alibi_float64_matches_float64_oracle(path):
    m = _module(ALIBI, torch.float64)
    if path == "reference":
        set_path(m, "reference")
    x = torch.randn(1, 300, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        out, _ = m(x)
    W, q, k, v = _projections(m, x)
    slopes = torch.tensor(schedules.alibi_slopes(m.plan.layout.heads), dtype=torch.float64)
    i = torch.arange(300, dtype=torch.float64)
    bias = -slopes[:, None, None] * (i[:, None] - i[None, :])
    o = attention_ref(q, k, v, scale=1 / math.sqrt(m.plan.layout.key_dim), bias=bias)
    ref = o.reshape(1, 300, -1) @ W["o_proj.weight"].T
    # was 1.3e-8 (float32 slopes and positions)
    assert ((out - ref).norm() / ref.norm()).item() < 1e-13


def test_alibi_bias_is_computed_in_float64_for_float64_slopes():
    slopes = torch.tensor(schedules.alibi_slopes(16), dtype=torch.float64)
    got = alibi_bias(slopes, 5, offset=100_000, keys=100_005)
    assert got.dtype == torch.float64
    exact = -slopes[0].item() * (100_003 - 17)  # slope 2^-0.5: not a float32
    assert got[0, 3, 17].item() == exact


@pytest.mark.parametrize("path", ["sdpa", "reference"])
def test_positional_float64_matches_float64_oracle(path):
    m = _module(POSITIONAL, torch.float64, context=400)
    if path == "reference":
        set_path(m, "reference")
    with torch.no_grad():
        m.distance_bias.copy_(torch.randn_like(m.distance_bias))
    T = 400
    x = torch.randn(1, T, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        out, _ = m(x)
    W, _, _, v = _projections(m, x)
    i = torch.arange(T)
    bias = W["distance_bias"][:, (i[:, None] - i[None, :]).clamp(min=0)]
    zeros = torch.zeros(1, T, m.plan.layout.heads, m.plan.layout.key_dim, dtype=torch.float64)
    o = attention_ref(zeros, zeros, v, scale=1.0, bias=bias)
    ref = o.reshape(1, T, -1) @ W["o_proj.weight"].T
    # was 3.6e-8 on the SDPA path (it cast the bias to float32)
    assert ((out - ref).norm() / ref.norm()).item() < 1e-13
