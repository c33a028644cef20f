"""The language reference (grammar/README.md) is generated where it can drift and parses where
it shows code: its slot table and error examples match the code, and its annotated examples
are valid specs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from seqdsl import typed_module
from tests.docs_generator import load_generator

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "grammar" / "README.md"


def test_generated_sections_are_up_to_date():
    gen = load_generator()
    text = README.read_text()
    assert gen.render(text, gen.GENERATED[README]) == text, "run `python docs/gen_reference.py`"


def test_every_primitive_is_documented():
    from seqdsl.ir import nodes

    text = README.read_text()
    for cls in nodes.Primitive.__subclasses__():
        assert f"| `{cls.model_fields['kind'].default}` |" in text, cls.__name__


def _examples() -> list[str]:
    section = README.read_text().split("## Annotated examples")[1].split("## Errors")[0]
    return re.findall(r"```\n(.*?)```", section, flags=re.DOTALL)


@pytest.mark.parametrize("code", _examples(), ids=lambda c: c.split("\n")[0][:30])
def test_annotated_examples_parse(code):
    module = typed_module(code)
    assert module.decls
