"""docs/checker.md's rule table is generated from the registry and must be up to date; every
rule is listed and explained."""

from __future__ import annotations

from pathlib import Path

from seqdsl.check import RULES
from tests.docs_generator import load_generator

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "checker.md"


def test_rules_table_is_up_to_date():
    gen = load_generator()
    text = DOC.read_text()
    assert gen.render(text, gen.GENERATED[DOC]) == text, "run `python docs/gen_reference.py`"


def test_every_rule_is_in_the_table():
    text = DOC.read_text()
    for r in RULES.values():
        assert f"| {r.code} | `{r.name}` |" in text


def test_check_mode_of_the_generator_passes():
    assert load_generator().main(["--check"]) == 0
