"""Each planted bug of tests/mutants/run.py still finds the text it replaces: a change that moves
an anchor (the conv's reference moved to seqdsl/reference/conv.py, and one mutant's text stayed
behind) would otherwise surface only when someone runs the mutants."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mutants():
    spec = importlib.util.spec_from_file_location("mutants_run", ROOT / "tests" / "mutants" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutants_run", module)
    spec.loader.exec_module(module)
    return module.MUTANTS


MUTANTS = _mutants()


def test_mutant_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_mutant_anchor_is_in_its_file(mutant):
    text = (ROOT / mutant.file).read_text()
    assert text.count(mutant.old) == mutant.count, (
        f"{mutant.name}: {mutant.file} holds its anchor {text.count(mutant.old)} times, not {mutant.count}")
    assert mutant.new != mutant.old
