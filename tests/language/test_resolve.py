"""Inheritance and presets: nearest wins, a preset included (it is expanded where it is written)."""

from __future__ import annotations

import pytest

from seqdsl import loads
from seqdsl.ir import nodes

BASE = "mixer a {}\nmodel m1 {\n    layers = 12\n    d_model = 768\n    vocab = 50277\n    mixer = a\n}\n"


def _model(text: str, name: str) -> nodes.Model:
    return next(m for m in loads(text).program.models if m.name == name)


def test_child_preset_overrides_base_fields():
    """Found in review: the base's explicit sizes beat the child's preset."""
    text = BASE + 'model m2 extends m1 {\n    preset = "tiny"\n}\n'
    m2 = _model(text, "m2")
    sizes = {k: getattr(m2, k) for k in nodes.PRESET_SIZES["tiny"]}
    assert sizes == nodes.PRESET_SIZES["tiny"] == {"layers": 2, "d_model": 128, "vocab": 256, "context": 256}
    assert m2.mixer == ("a",)  # what the preset does not set still comes from the base
    assert _model(text, "m1").layers == 12


def test_fields_beside_a_preset_override_it_and_grandchildren_override_both():
    text = (BASE + 'model m2 extends m1 {\n    preset = "tiny"\n    d_model = 64\n}\n'
            "model m3 extends m2 {\n    layers = 3\n}\n")
    m2, m3 = _model(text, "m2"), _model(text, "m3")
    assert (m2.layers, m2.d_model, m2.vocab, m2.context) == (2, 64, 256, 256)
    assert (m3.layers, m3.d_model, m3.vocab, m3.context) == (3, 64, 256, 256)


def test_base_preset_is_overridden_by_child_fields_and_child_preset():
    text = ('mixer a {}\nmodel b {\n    preset = "110m"\n    mixer = a\n}\n'
            "model c extends b {\n    layers = 4\n}\n"
            'model d extends c {\n    preset = "tiny"\n}\n')
    b, c, d = _model(text, "b"), _model(text, "c"), _model(text, "d")
    assert (b.layers, b.d_model) == (12, 768)
    assert (c.layers, c.d_model) == (4, 768)
    assert (d.layers, d.d_model, d.context) == (2, 128, 256)


@pytest.mark.parametrize("key", sorted(nodes.PRESET_SIZES["tiny"]))
def test_preset_sizes_point_at_the_preset(key):
    """A size that came from the child's preset points there, not at the base's overridden line."""
    text = BASE + 'model m2 extends m1 {\n    preset = "tiny"\n}\n'
    span = loads(text).sources.get("model", "m2", key)
    assert (span.line, span.line_text) == (9, '    preset = "tiny"')


def test_explicit_field_beside_a_preset_keeps_its_own_span():
    text = BASE + 'model m2 extends m1 {\n    preset = "tiny"\n    d_model = 64\n}\n'
    sources = loads(text).sources
    assert sources.get("model", "m2", "d_model").line == 10
    assert sources.get("model", "m2", "mixer").line == 6  # inherited: points at the base
