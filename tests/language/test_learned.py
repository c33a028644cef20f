"""`learned(init)` values (softmax temperature, dot scale), `kv_groups`, and the messages for
architectures the language cannot express yet: typing, canonical printing, conflicts, the
kernel key and the checker (torch-free)."""

from __future__ import annotations

import pytest

import seqdsl
from seqdsl.check import check_program
from seqdsl.errors import SeqError
from seqdsl.ir import nodes
from seqdsl.ir.conflicts import conflicts
from seqdsl.ir.key import kernel_key
from seqdsl.ir.layout import LayoutError, head_layout
from seqdsl.ir.printer import format_program


def mixer(text: str) -> nodes.Mixer:
    return seqdsl.loads(text).program.mixers[-1]


def test_learned_temperature_and_scale_are_typed():
    m = mixer("mixer f { weights = softmax(temperature = learned(0.5))  relation = dot(scale = learned) }")
    assert m.weights.temperature == nodes.Learned(init=0.5)
    assert m.relation.scale == nodes.Learned(init=1.0)


def test_learned_values_round_trip_through_the_printer():
    program = seqdsl.loads("mixer f { heads = 4  kv_groups = 2  weights = softmax(temperature = learned(0.5))"
                           "  relation = dot(scale = learned(0.125)) }").program
    text = format_program(program)
    assert "softmax(temperature=learned(0.5))" in text and "dot(scale=learned(0.125))" in text
    assert "kv_groups = 2" in text
    assert seqdsl.loads(text).program == program


@pytest.mark.parametrize("bad", ["learned(0)", "learned(-1.0)"])
def test_learned_init_must_be_positive(bad):
    with pytest.raises(SeqError, match="learned` init: a learned value must be at least 1e-06"):
        mixer(f"mixer f {{ weights = softmax(temperature = {bad}) }}")


def test_learned_is_not_accepted_where_no_value_is_learned():
    with pytest.raises(SeqError, match="unknown visibility `learned`"):
        mixer("mixer f { visibility = learned(3.0) }")


def test_kernel_key_marks_learned_values_and_kv_groups():
    m = mixer("mixer f { heads = 8  kv_groups = 2  relation = dot(scale = learned(0.25))"
              "  weights = softmax(temperature = learned(2.0)) }")
    key = kernel_key(m, 512)
    assert (key.learned_scale, key.learned_temperature) == (True, True)
    assert (key.scale, key.temperature) == (1.0, 1.0)  # the lowering folds them into q
    assert (key.heads, key.kv_groups, key.qk_groups) == (8, 2, 8)
    plain = kernel_key(mixer("mixer g { heads = 8 }"), 512)
    assert (plain.learned_scale, plain.learned_temperature, plain.kv_groups) == (False, False, 8)


def test_kv_groups_layout():
    layout = head_layout(mixer("mixer f { heads = 12  kv_groups = 4 }"), 768)
    assert (layout.heads, layout.kv_groups, layout.key_groups, layout.qk_groups) == (12, 4, 4, 12)
    mamba = head_layout(mixer("mixer f { heads = 12  qk_groups = 1 }"), 768)
    assert (mamba.key_groups, mamba.kv_groups) == (1, 12)
    with pytest.raises(LayoutError, match="kv_groups = 5 does not divide its 12 heads"):
        head_layout(mixer("mixer f { heads = 12  kv_groups = 5 }"), 768)


def test_sharing_both_qk_and_kv_is_a_conflict():
    found = conflicts(mixer("mixer f { heads = 12  qk_groups = 3  kv_groups = 3 }"))
    assert [c.where for c in found] == [("kv_groups",)]


def test_learned_temperature_with_a_score_bias_is_a_named_conflict():
    found = conflicts(mixer("mixer f { weights = softmax(temperature = learned)  position = alibi }"))
    assert any("learned temperature with a score bias" in c.message for c in found)
    # a learned scale multiplies q.k only, so it composes with a bias
    assert not conflicts(mixer("mixer f { relation = dot(scale = learned(0.1))  position = alibi }"))


def test_checker_judges_a_learned_temperature_from_its_init():
    report = check_program(seqdsl.loads("mixer f { heads = 4  weights = softmax(temperature = learned(2.0)) }"))
    messages = [d.message for d in report.diagnostics if d.code == "N002"]
    assert messages and "learned(2), judged at its initial value" in messages[0]
    sharp = seqdsl.loads("mixer f { heads = 4  weights = softmax(temperature = learned(0.5)) }")
    assert not [d for d in check_program(sharp).diagnostics if d.code == "N002"]


@pytest.mark.parametrize("text, limitation", [
    ("mixer h { conv = long(4096) }", "long convolutions (Hyena-style"),
    ("mixer h { conv = hyena }", "long convolutions (Hyena-style"),
    ("mixer n { branches = [compressed, selected, window] }", "multi-branch mixers (NSA"),
    ("mixer n { select = nsa(16) }", "multi-branch mixers (NSA"),
    ("mixer n { visibility = compressed(32) }", "multi-branch mixers (NSA"),
])
def test_architectures_not_in_the_language_yet_name_the_limitation(text, limitation):
    with pytest.raises(SeqError) as err:
        seqdsl.loads(text)
    assert limitation in err.value.message and "not in the language yet" in err.value.message
    assert "docs/roadmap.md" in err.value.hint


def test_checker_reports_kv_groups_that_do_not_divide_the_heads():
    report = check_program(seqdsl.loads("mixer f { heads = 12  kv_groups = 5 }\n"
                                        "model m { preset = \"tiny\"  mixer = f }"))
    assert [f.code for f in report.diagnostics if "kv_groups = 5" in f.message] == ["M003"]
