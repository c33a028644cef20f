"""Pillar N judged from the effective logit scale (seqdsl/check/sharpness.py): scale, temperature
and QK-norm together, the same for every way of writing a spec (issue 9.4), and Top-1 element
selection, whose forward is an arg-max (issue 8.6)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqdsl import loads
from seqdsl.check import check_program
from seqdsl.check.sharpness import (effective_inverse_temperature,
                                    forward_keys, max_softmax_weight, qk_norm_logit_bound,
                                    sharpness)

MODEL = 'model lm { preset = "110m" mixer = m }\n'  # context 2048, d_model 768


def check(body: str, **kw):
    return check_program(loads("mixer m {\n" + body + "\n}\n" + MODEL, "t.seq"), **kw)


def mixer(body: str):
    return loads("mixer m {\n" + body + "\n}\n").program.mixer("m")


def n002(report):
    found = [d for d in report.diagnostics if d.code == "N002"]
    assert len(found) <= 1
    return found[0] if found else None


# --- the numbers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("body,beta", [
    ("", 1.0),
    ("weights = softmax(temperature=2.0)", 0.5),
    ("relation = dot(scale=0.0625)", 0.5),  # 1/(2 sqrt(64)): temperature 2 written as a scale
    ("relation = dot(scale=0.001)", 0.008),
    ("relation = dot(scale=-0.125)", 1.0),  # a sign flip, not a flatter softmax
    ("relation = dot(scale=0.25)\n weights = softmax(temperature=2.0)", 1.0),
])
def test_effective_inverse_temperature(body, beta):
    assert effective_inverse_temperature(mixer(body), 64) == pytest.approx(beta, rel=1e-12)


def test_qk_norm_bound_is_scale_times_dk_at_unit_gain():
    assert qk_norm_logit_bound(mixer(""), 64) is None
    assert qk_norm_logit_bound(mixer("relation = dot(qk_norm=true)"), 64) == pytest.approx(8.0)
    cosine = mixer("relation = dot(qk_norm=true, scale=0.015625)")  # scale 1/Dk: q.k/Dk = cos
    assert qk_norm_logit_bound(cosine, 64) == pytest.approx(1.0)
    assert qk_norm_logit_bound(cosine, 64, gain=2.0) == pytest.approx(4.0)  # g_q g_k = 4


def test_cosine_scores_cap_the_top_weight_near_0_004():
    """The issue's number, computed directly: one key at +1, 2047 at -1."""
    direct = math.exp(1) / (math.exp(1) + 2047 * math.exp(-1))
    assert max_softmax_weight(1.0, 2048) == pytest.approx(direct, rel=1e-12)
    assert 0.0035 < max_softmax_weight(1.0, 2048) < 0.0037  # the issue's ~0.004


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 20.0), st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=64),
       st.integers(0, 63))
def test_max_weight_bounds_every_softmax_in_range(bound, unit_logits, which):
    """No logit vector inside [-L, L] puts more weight on one key than the closed form."""
    logits = [bound * u for u in unit_logits]
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    share = weights[which % len(logits)] / sum(weights)
    assert share <= max_softmax_weight(bound, len(logits)) * (1 + 1e-12)


@pytest.mark.parametrize("body,keys", [
    ("", 2048), ("visibility = window(256)", 256), ("visibility = chunk_local(4096)", 2048),
    ("select = top(1)", 1), ("select = top(4)", 4),
    ("select = top(1, over=chunk(128))", 256),
    ("select = top(2, over=chunk(128), local=false)", 256),
    ("select = top(32, over=chunk(128))", 2048),
])
def test_forward_keys(body, keys):
    assert forward_keys(mixer(body), 2048) == keys


# --- the verdicts --------------------------------------------------------------------------------


@pytest.mark.parametrize("body,verdict", [
    ("relation = dot(scale=0.001)", "degraded"),  # passed before: only the temperature was read
    ("weights = softmax(temperature=2.0)", "degraded"),
    ("relation = dot(qk_norm=true, scale=0.015625)", "degraded"),  # cosine scores: passed before
    ("relation = dot(qk_norm=true)", "pass"),  # L = sqrt(64) = 8: top weight 0.9998 over 2048
    ("relation = dot(scale=0.5)", "pass"),  # sharper than standard
    ("weights = softmax(temperature=0.5)", "pass"),
])
def test_sharpness_verdicts(body, verdict):
    assert check(body).verdict == verdict


def test_qk_norm_message_states_the_assumed_gain():
    d = n002(check("relation = dot(qk_norm=true, scale=0.015625)"))
    assert d.severity == "warning"
    assert "assuming the learnable RMSNorm gains g of q and k stay at their initial 1" in d.message
    assert "at most 0.0036 of the weight over 2,048 keys" in d.message


def test_qk_norm_with_unit_scale_is_sharp_under_rms_norm():
    """Issue 9.4 expected `dot(qk_norm = true, scale = 1.0)` to be capped like cosine scores.
    The lowering RMS-normalises q and k (|q| = sqrt(Dk), not 1), so its logits reach +-64 at
    Dk = 64: sharper than standard, not capped. Cosine-sized logits are scale = 1/Dk (above)."""
    s = sharpness(mixer("relation = dot(qk_norm=true, scale=1.0)"), 64, 2048)
    assert s.logit_bound == pytest.approx(64.0) and s.max_weight > 0.999
    assert check("relation = dot(qk_norm=true, scale=1.0)").verdict == "pass"


def test_qk_norm_cap_depends_on_how_many_keys_the_softmax_sees():
    """Dk = 16 at the standard scale: L = 4. Over 2048 keys one key can take 0.59 of the weight;
    over 65,536 only 0.04; inside two chunks of 128 (top-1 chunk selection), 0.92."""
    body = "key_dim = 16\n relation = dot(qk_norm=true)"
    assert check(body).verdict == "pass"
    long = check(body, context=65536)
    assert long.verdict == "degraded" and "over 65,536 keys" in n002(long).message
    assert check(body + "\n select = top(1, over=chunk(128))", context=65536).verdict == "pass"
    assert check("key_dim = 16", context=65536).verdict == "pass"  # no qk_norm: unbounded


def test_element_top1_temperature_only_shapes_the_backward():
    """Issue 8.6: the forward of top(1) over elements is an arg-max; N002 said 'flatter'."""
    report = check("select = top(1)\n weights = softmax(temperature=4.0)")
    d = n002(report)
    assert report.verdict == "pass" and d.severity == "info"
    assert "the forward is an arg-max" in d.message and "straight-through backward" in d.message
    assert "flatter than a standard softmax" not in d.message
    none = n002(check("select = top(1, grad=none)\n weights = softmax(temperature=4.0)"))
    assert none.severity == "info" and "has no effect" in none.message


@pytest.mark.parametrize("select", ["top(4)", "top(1, over=chunk(128))"])
def test_selection_that_mixes_with_softmax_is_still_flattened(select):
    """top(k > 1) and chunk selection mix their kept keys with the softmax: T shapes the forward."""
    d = n002(check(f"select = {select}\n weights = softmax(temperature=4.0)"))
    assert d.severity == "warning" and "flatter than a standard softmax" in d.message


# --- equivalent specs, written two ways ----------------------------------------------------------

SELECTS = ["none", "top(1)", "top(4)", "top(1, over=chunk(128))", "top(2, over=chunk(16))"]


def _verdict_and_n002(body: str):
    report = check(body)
    d = n002(report)
    return report.verdict, (d.severity if d else None)


@settings(max_examples=120, deadline=None)
@given(temperature=st.floats(0.05, 50.0), key_dim=st.sampled_from([16, 32, 64, 128, 256]),
       qk_norm=st.booleans(), select=st.sampled_from(SELECTS), context=st.sampled_from([256, 2048]))
def test_scale_and_temperature_spellings_agree(temperature, key_dim, qk_norm, select, context):
    """`softmax(temperature = T)` and `dot(scale = 1/(T sqrt(Dk)))` are one mixer: same verdict,
    same N002 severity (issue 9.4's 'the same way everywhere')."""
    norm = "true" if qk_norm else "false"
    common = f"key_dim = {key_dim}\n select = {select}\n"
    as_temperature = (common + f"relation = dot(qk_norm={norm})\n"
                      f"weights = softmax(temperature={temperature!r})")
    scale = 1.0 / (temperature * math.sqrt(key_dim))
    as_scale = common + f"relation = dot(qk_norm={norm}, scale={scale!r})"
    tail = f"\n}}\nmodel lm {{ preset = \"110m\" mixer = m context = {context} }}\n"
    a = check_program(loads("mixer m {\n" + as_temperature + tail, "a.seq"))
    b = check_program(loads("mixer m {\n" + as_scale + tail, "b.seq"))
    assert a.verdict == b.verdict
    assert [(d.code, d.severity) for d in a.diagnostics if d.code == "N002"] == \
        [(d.code, d.severity) for d in b.diagnostics if d.code == "N002"]
