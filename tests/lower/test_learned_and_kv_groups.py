"""Lowering of `learned(init)` temperatures/scales and of `kv_groups` (grouped-query attention),
each against an independent float64 reference."""

from __future__ import annotations

import math

import pytest
import torch

import seqdsl
from seqdsl.lower.mixer import LoweringError, MixerModule
from seqdsl.lower.paths import set_path

D = 64


def module(text: str, d_model: int = D) -> MixerModule:
    torch.manual_seed(0)
    return MixerModule(seqdsl.loads(text).program.mixers[-1], d_model).double()


def rel_error(got, expected) -> float:
    return (torch.linalg.norm(got - expected) / torch.linalg.norm(expected)).item()


def causal_softmax_heads(q, k, v, logit_factor):
    """(B, T, H, Dv) softmax(q.k * logit_factor_h) v over the causal prefix, head by head."""
    s = torch.einsum("bihd,bjhd->bhij", q, k) * logit_factor[None, :, None, None]
    T = q.shape[1]
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.einsum("bhij,bjhd->bihd", torch.softmax(s, -1), v)


def test_learned_temperature_and_scale_match_a_direct_reference():
    m = module("mixer f { heads = 4  head_dim = 16  relation = dot(scale = learned(0.3))"
               "  weights = softmax(temperature = learned(2.0)) }")
    with torch.no_grad():  # different per-head values, as training would leave them
        m.log_scale.copy_(torch.log(torch.tensor([0.3, 0.1, 0.5, 1.0])))
        m.log_temperature.copy_(torch.log(torch.tensor([2.0, 0.5, 1.0, 4.0])))
    x = torch.randn(2, 9, D, dtype=torch.float64)
    q = m.q_proj(x).view(2, 9, 4, 16)
    k = m.k_proj(x).view(2, 9, 4, 16)
    v = m.v_proj(x).view(2, 9, 4, 16)
    factor = m.log_scale.exp() / m.log_temperature.exp()
    expected = m.o_proj(causal_softmax_heads(q, k, v, factor).reshape(2, 9, 64))
    out = m(x)[0]
    assert rel_error(out, expected) < 1e-12
    weights = torch.randn_like(out)  # gradients of a random projection of the output
    params = (m.log_scale, m.log_temperature)
    got = torch.autograd.grad((out * weights).sum(), params)
    want = torch.autograd.grad((expected * weights).sum(), params)
    for g, w in zip(got, want):
        assert rel_error(g, w) < 1e-10


def test_learned_values_start_where_the_fixed_ones_are():
    fixed = module("mixer f { heads = 4  head_dim = 16  relation = dot(scale = 0.2)"
                   "  weights = softmax(temperature = 0.5) }")
    learned = module("mixer f { heads = 4  head_dim = 16  relation = dot(scale = learned(0.2))"
                     "  weights = softmax(temperature = learned(0.5)) }")
    learned.load_state_dict(fixed.state_dict(), strict=False)
    with torch.no_grad():  # the parameters were made in float32: log(init) again, in float64
        learned.log_scale.fill_(math.log(0.2))
        learned.log_temperature.fill_(math.log(0.5))
    x = torch.randn(2, 7, D, dtype=torch.float64)
    assert rel_error(learned(x)[0], fixed(x)[0]) < 1e-12


def test_learned_values_start_at_their_init():
    m = module("mixer f { heads = 4  head_dim = 16  relation = dot(scale = learned(0.2))"
               "  weights = softmax(temperature = learned(0.5)) }")
    assert torch.allclose(m.log_scale.exp(), torch.full((4,), 0.2, dtype=m.log_scale.dtype))
    assert torch.allclose(m.log_temperature.exp(), torch.full((4,), 0.5, dtype=m.log_temperature.dtype))


def test_learned_temperature_stays_positive_and_trains():
    m = module("mixer f { heads = 2  head_dim = 32  weights = softmax(temperature = learned(1.0)) }")
    x = torch.randn(1, 5, D, dtype=torch.float64)
    m(x)[0].square().sum().backward()
    assert m.log_temperature.grad is not None and m.log_temperature.grad.abs().sum() > 0
    with torch.no_grad():
        m.log_temperature.fill_(-60.0)  # exp(-60) > 0: no sign flip, however far the optimiser goes
    assert torch.isfinite(m(x)[0]).all()


def test_a_learned_temperature_below_the_bound_acts_as_the_bound():
    """Trained below 1e-6 (the language's bound on a temperature), it scales the queries as 1e-6
    does (the whole output would not tell: both are arg-max sharp)."""
    m = module("mixer f { heads = 2  head_dim = 32  weights = softmax(temperature = learned(1e-6)) }")
    q = torch.randn(1, 9, 2, 32, dtype=torch.float64)
    with torch.no_grad():
        m.log_temperature.fill_(-30.0)  # 9e-14
        below = m.mixing.learned(m, q)
        m.log_temperature.fill_(math.log(1e-6))
        at_bound = m.mixing.learned(m, q)
    assert rel_error(below, at_bound) < 1e-12 and rel_error(at_bound, q * 1e6) < 1e-12


def test_learned_scale_in_a_recurrence_multiplies_the_scores():
    fixed = module("mixer f { heads = 2  head_dim = 32  weights = linear  update = delta"
                   "  relation = dot(scale = 0.7) }")
    learned = module("mixer f { heads = 2  head_dim = 32  weights = linear  update = delta"
                     "  relation = dot(scale = learned(0.7)) }")
    learned.load_state_dict(fixed.state_dict(), strict=False)
    with torch.no_grad():
        learned.log_scale.fill_(math.log(0.7))
    x = torch.randn(2, 6, D, dtype=torch.float64)
    assert rel_error(learned(x)[0], fixed(x)[0]) < 1e-12


def test_learned_temperature_with_a_decay_is_refused_by_name():
    with pytest.raises(LoweringError, match="learned temperature with a score bias"):
        module("mixer f { weights = softmax(temperature = learned)  decay = data_dependent(scalar) }")


@pytest.mark.parametrize("body", [
    "position = rope",  # softmax family
    "weights = linear  decay = data_dependent(scalar)  conv = causal(4)",  # recurrent family
])
def test_kv_groups_equal_heads_with_repeated_key_value_weights(body):
    """GQA is MHA whose k and v projections are the group's, repeated for each head of it."""
    gqa = module(f"mixer f {{ heads = 4  head_dim = 16  kv_groups = 2  {body} }}")
    mha = module(f"mixer f {{ heads = 4  head_dim = 16  {body} }}")
    state = gqa.state_dict()
    for name in ("k_proj.weight", "v_proj.weight"):
        state[name] = state[name].view(2, 16, D).repeat_interleave(2, dim=0).reshape(64, D)
    if "conv_weight" in state:  # channels: q (4 heads), k (2 -> 4), v (2 -> 4)
        q, k, v = state["conv_weight"].split([64, 32, 32])
        rep = lambda w: w.view(2, 16, -1).repeat_interleave(2, dim=0).reshape(64, -1)
        state["conv_weight"] = torch.cat([q, rep(k), rep(v)])
    mha.load_state_dict(state)
    x = torch.randn(2, 11, D, dtype=torch.float64)
    assert rel_error(gqa(x)[0], mha(x)[0]) < 1e-12


def test_kv_cache_stores_the_shared_heads_once_and_decoding_matches():
    m = module("mixer f { heads = 8  head_dim = 8  kv_groups = 2  position = rope }")
    assert m.k_proj.weight.shape == (2 * 8, D) and m.v_proj.weight.shape == (2 * 8, D)
    x = torch.randn(1, 10, D, dtype=torch.float64)
    full, state = m(x)
    assert state.k.shape == (1, 10, 2, 8) and state.v.shape == (1, 10, 2, 8)
    y1, s = m(x[:, :6])
    steps = [y1]
    for t in range(6, 10):
        y, s = m(x[:, t:t + 1], s)
        steps.append(y)
    assert rel_error(torch.cat(steps, 1), full) < 1e-12


def test_multi_query_attention_has_one_key_value_head():
    m = module("mixer f { heads = 4  head_dim = 16  kv_groups = 1 }")
    assert m.k_proj.weight.shape == (16, D) and m.v_proj.weight.shape == (16, D)
    assert m.q_proj.weight.shape == (64, D)
    assert math.isfinite(m(torch.randn(1, 3, D, dtype=torch.float64))[0].sum().item())


@pytest.mark.parametrize("body", ["position = rope", "visibility = window(4)  position = alibi"])
def test_gqa_decoding_hands_sdpa_the_cached_shared_heads_unrepeated(body, monkeypatch):
    """Each SDPA call (is_causal and explicit-mask) gets the K = 2 cached key/value heads with
    enable_gqa, never the cache repeated to H = 8 heads; the result equals the reference path,
    which repeats them readably."""
    m = module(f"mixer f {{ heads = 8  head_dim = 8  kv_groups = 2  {body} }}")
    reference = module(f"mixer f {{ heads = 8  head_dim = 8  kv_groups = 2  {body} }}")
    reference.load_state_dict(m.state_dict())
    set_path(reference, "reference")
    calls, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        calls.append((q.shape[1], k.shape[1], v.shape[1], kwargs.get("enable_gqa", False)))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    x = torch.randn(1, 9, D, dtype=torch.float64)
    outs, state = [], None
    for a, b in [(0, 6), (6, 7), (7, 8), (8, 9)]:
        y, state = m(x[:, a:b], state)
        outs.append(y)
    assert calls == [(8, 2, 2, True)] * 4
    assert state.k.shape == (1, 9, 2, 8) and state.v.shape == (1, 9, 2, 8)
    assert rel_error(torch.cat(outs, 1), reference(x)[0]) < 1e-12


def test_query_key_groups_in_softmax_decode_like_the_reference():
    """qk_groups: the cache holds G = 2 key heads and H = 4 value heads; SDPA gets the keys
    repeated to the values' heads, and pieces plus decoding equal the reference path."""
    m = module("mixer f { heads = 4  head_dim = 8  qk_groups = 2  position = rope }")
    reference = module("mixer f { heads = 4  head_dim = 8  qk_groups = 2  position = rope }")
    reference.load_state_dict(m.state_dict())
    set_path(reference, "reference")
    x = torch.randn(2, 10, D, dtype=torch.float64)
    outs, state = [], None
    for a, b in [(0, 4), (4, 5), (5, 8), (8, 9), (9, 10)]:
        y, state = m(x[:, a:b], state)
        outs.append(y)
    assert state.k.shape == (2, 10, 2, 8) and state.v.shape == (2, 10, 4, 8)
    assert rel_error(torch.cat(outs, 1), reference(x)[0]) < 1e-12
