"""attention_ref, rope and alibi_slopes against independent oracles.

Softmax weights are checked against torch's scaled_dot_product_attention fed an explicit float mask
built here (not by the module under test); the linear kinds against a naive double loop; rope
against complex multiplication and its defining properties. All in float64, so tolerances are
tight and a mismatch means a wrong formula, not rounding.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from seqdsl.reference.attention import alibi_slopes, attention_ref, rope

F64 = torch.float64
LENGTHS = [1, 7, 63, 100, 129]


def make_qkv(B=2, T=7, H=3, Dk=8, Dv=5, seed=0, dtype=F64, grad=False):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, T, H, d, generator=gen, dtype=dtype) for d in (Dk, Dk, Dv))
    return [t.requires_grad_(grad) for t in (q, k, v)]


def sdpa_oracle(q, k, v, *, scale, temperature=1.0, window=None, chunk_local=None, slopes=None,
                bias=None):
    """SDPA with one explicit additive mask: (s + bias) / tau, -inf outside the visible set."""
    B, T, H, _ = q.shape
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    visible = j <= i
    if window is not None:
        visible &= j > i - window
    if chunk_local is not None:
        visible &= (j // chunk_local) == (i // chunk_local)
    add = torch.zeros(H, T, T, dtype=q.dtype)
    if slopes is not None:
        add = add - slopes.to(q.dtype)[:, None, None] * (i - j)
    if bias is not None:
        add = add + bias
    add = (add / temperature).masked_fill(~visible, float("-inf"))
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
        attn_mask=add, scale=scale / temperature,
    )
    return out.transpose(1, 2)


def grads(out, inputs, dout):
    return torch.autograd.grad(out, inputs, dout)


CONFIGS = {
    "full": {},
    "window": {"window": 5},
    "window1": {"window": 1},
    "chunk_local": {"chunk_local": 4},
    "alibi": {"alibi": True},
    "cold": {"temperature": 0.25},
    "hot_window_alibi": {"temperature": 3.0, "window": 16, "alibi": True},
}


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_softmax_matches_sdpa_outputs_and_grads(T, name):
    cfg = dict(CONFIGS[name])
    H = 3
    slopes = alibi_slopes(H, dtype=F64) if cfg.pop("alibi", False) else None
    q, k, v = make_qkv(T=T, H=H, seed=T, grad=True)
    scale = 1 / math.sqrt(q.shape[-1])
    ours = attention_ref(q, k, v, scale=scale, alibi_slopes=slopes, **cfg)
    theirs = sdpa_oracle(q, k, v, scale=scale, slopes=slopes, **cfg)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)
    dout = torch.randn_like(ours)
    for a, b in zip(grads(ours, (q, k, v), dout), grads(theirs, (q, k, v), dout)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_bias_matches_sdpa_including_bias_grad():
    H, T = 2, 33
    q, k, v = make_qkv(T=T, H=H, grad=True)
    bias = torch.randn(H, T, T, dtype=F64, requires_grad=True)
    ours = attention_ref(q, k, v, scale=0.3, bias=bias)
    theirs = sdpa_oracle(q, k, v, scale=0.3, bias=bias)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)
    dout = torch.randn_like(ours)
    for a, b in zip(grads(ours, (q, k, v, bias), dout), grads(theirs, (q, k, v, bias), dout)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def loop_linear(q, k, v, *, scale, normalized, window=None, chunk_local=None):
    """o_i = sum_j w_ij v_j, one (i, j) pair at a time."""
    B, T, H, _ = q.shape
    out = torch.zeros(B, T, H, v.shape[-1], dtype=v.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                acc, total = torch.zeros(v.shape[-1], dtype=v.dtype), 0.0
                for j in range(i + 1):
                    if window is not None and j <= i - window:
                        continue
                    if chunk_local is not None and j // chunk_local != i // chunk_local:
                        continue
                    w = float(q[b, i, h] @ k[b, j, h]) * scale
                    acc += w * v[b, j, h]
                    total += w
                out[b, i, h] = acc / total if normalized else acc
    return out


@pytest.mark.parametrize("T", [1, 7, 33])
@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("vis", [{}, {"window": 3}, {"chunk_local": 5}])
def test_linear_kinds_match_double_loop(T, normalized, vis):
    q, k, v = make_qkv(B=1, T=T, H=2, seed=T)
    if normalized:
        # non-negative feature map (elu + 1), as normalized_linear requires
        q, k = F.elu(q) + 1, F.elu(k) + 1
    weights = "normalized_linear" if normalized else "linear"
    ours = attention_ref(q, k, v, scale=0.5, weights=weights, **vis)
    theirs = loop_linear(q, k, v, scale=0.5, normalized=normalized, **vis)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    T=st.integers(2, 40),
    cut=st.integers(0, 39),
    weights=st.sampled_from(["softmax", "linear", "normalized_linear"]),
    window=st.one_of(st.none(), st.integers(1, 8)),
    seed=st.integers(0, 2**16),
)
def test_future_tokens_never_change_past_outputs(T, cut, weights, window, seed):
    cut = cut % T
    q, k, v = make_qkv(B=1, T=T, H=2, seed=seed)
    if weights == "normalized_linear":
        q, k = q.abs(), k.abs() + 0.1
    before = attention_ref(q, k, v, scale=0.4, weights=weights, window=window)
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    for t in (q2, k2, v2):
        t[:, cut + 1:] = torch.rand_like(t[:, cut + 1:]) * 5
    after = attention_ref(q2, k2, v2, scale=0.4, weights=weights, window=window)
    assert torch.equal(before[:, : cut + 1], after[:, : cut + 1])


def test_batch_invariance():
    q, k, v = make_qkv(B=3, T=63)
    slopes = alibi_slopes(3, dtype=F64)
    whole = attention_ref(q, k, v, scale=0.3, alibi_slopes=slopes, window=9)
    for b in range(3):
        one = attention_ref(q[b:b + 1], k[b:b + 1], v[b:b + 1], scale=0.3,
                            alibi_slopes=slopes, window=9)
        torch.testing.assert_close(whole[b:b + 1], one, rtol=1e-12, atol=1e-14)


def test_float32_close_to_float64_golden():
    q, k, v = make_qkv(T=100)
    golden = attention_ref(q, k, v, scale=0.35)
    f32 = attention_ref(q.float(), k.float(), v.float(), scale=0.35)
    assert f32.dtype == torch.float32
    torch.testing.assert_close(f32.double(), golden, rtol=1e-5, atol=1e-6)


def test_alibi_slopes_match_the_paper():
    # power of two: 2^(-8/H), 2^(-16/H), ..., 2^-8
    assert alibi_slopes(8, dtype=F64).tolist() == [2.0 ** -(h + 1) for h in range(8)]
    assert alibi_slopes(4, dtype=F64).tolist() == [4.0 ** -(h + 1) for h in range(4)]
    # non power of two: slopes(4) then every other slope of 8 (2^-1, 2^-3), as in the paper's code
    assert alibi_slopes(6, dtype=F64).tolist() == [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    assert alibi_slopes(1, dtype=F64).tolist() == [2.0**-8]
    twelve = alibi_slopes(12, dtype=F64)
    assert twelve.shape == (12,) and len(set(twelve.tolist())) == 12


def test_rope_matches_complex_rotation():
    B, T, H, D, offset, base = 2, 63, 3, 8, 5, 500.0
    x = torch.randn(B, T, H, D, dtype=F64)
    half = D // 2
    z = torch.complex(x[..., :half], x[..., half:])
    freq = base ** (-torch.arange(half, dtype=F64) * 2 / D)
    angle = torch.arange(offset, offset + T, dtype=F64)[:, None] * freq
    rotated = z * torch.polar(torch.ones_like(angle), angle)[None, :, None, :]
    expected = torch.cat([rotated.real, rotated.imag], dim=-1)
    torch.testing.assert_close(rope(x, base=base, offset=offset), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("T", [1, 7, 100])
def test_rope_preserves_norms(T):
    x = torch.randn(2, T, 3, 16, dtype=F64)
    torch.testing.assert_close(rope(x, offset=11).norm(dim=-1), x.norm(dim=-1))


def test_rope_scores_depend_only_on_relative_position():
    # shifting every position by the same amount leaves all q_i . k_j unchanged
    q, k, _ = make_qkv(T=63, Dk=16)
    def scores(offset):
        return torch.einsum("bihd,bjhd->bhij", rope(q, offset=offset), rope(k, offset=offset))
    for shift in (1, 17, 1000):
        torch.testing.assert_close(scores(0), scores(shift), rtol=1e-9, atol=1e-9)
    # and one (q, k) pair at positions (i, j) scores the same for every pair with equal i - j
    a, b = torch.randn(2, 1, 1, 1, 16, dtype=F64)
    dots = [float((rope(a, offset=i) * rope(b, offset=i - 3)).sum()) for i in (3, 10, 500)]
    assert max(dots) - min(dots) < 1e-9
    assert abs(dots[0] - float((rope(a, offset=3) * rope(b, offset=3)).sum())) > 1e-6


@pytest.mark.parametrize("t", [0, 1, 62, 99])
def test_rope_single_decoding_step_equals_slice_of_full(t):
    x = torch.randn(1, 100, 2, 8, dtype=F64)
    torch.testing.assert_close(rope(x[:, t:t + 1], offset=t), rope(x)[:, t:t + 1],
                               rtol=1e-12, atol=1e-12)


def test_rope_rejects_odd_dim():
    with pytest.raises(ValueError):
        rope(torch.zeros(1, 2, 1, 3))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_runs_forward_backward_on_device(device, dtype):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    q, k, v = (t.to(device).requires_grad_() for t in make_qkv(T=63, dtype=dtype))
    slopes = alibi_slopes(3, dtype=dtype, device=device)
    out = attention_ref(rope(q), rope(k), v, scale=0.3, alibi_slopes=slopes, window=8)
    out.sum().backward()
    assert out.device.type == device and out.dtype == dtype
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
