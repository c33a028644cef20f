"""The printer is the parser's inverse: on every spec of the library and on random valid IR.

- `typed_module(format_module(m)) == m` for modules as written (imports, extends, assigns);
- `loads(format_program(p)).program == p` for resolved programs (inheritance applied,
  defaults filled): what `seqdsl fmt --resolved` prints means the same program.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from seqdsl import format_module, format_program, load, loads, typed_module
from seqdsl.ir import nodes

from .strategies import modules, programs

SPECS = Path(__file__).resolve().parents[2] / "specs"
SPEC_FILES = sorted(SPECS.glob("*.seq"))


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_spec_module_roundtrips(path):
    module = typed_module(path.read_text(), str(path))
    assert module.decls, "a spec declares something"
    text = format_module(module)
    assert typed_module(text) == module
    assert format_module(typed_module(text)) == text  # canonical text is a fixed point


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_spec_program_roundtrips(path):
    program = load(path).program
    again = loads(format_program(program)).program
    assert again.mixers == program.mixers and again.models == program.models


def test_canonical_form_drops_only_comments_and_defaults():
    text = "# c\nmixer a {\n    relation = dot(scale=auto)   # default kept as written\n}\n"
    assert format_module(typed_module(text)) == "mixer a {\n    relation = dot\n}\n"


def test_program_prints_non_defaults_only():
    program = loads("mixer a { weights = softmax(temperature=0.5) heads = 12 }").program
    assert format_program(program) == (
        "mixer a {\n    heads = 12\n    weights = softmax(temperature=0.5)\n}\n")


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # examples: the profile's
@given(modules)
def test_random_modules_roundtrip(module: nodes.Module):
    text = format_module(module)
    assert typed_module(text) == module, text


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # examples: the profile's
@given(programs())
def test_random_programs_roundtrip(program: nodes.Program):
    text = format_program(program)
    loaded = loads(text).program
    assert loaded.mixers == program.mixers, text
    assert loaded.models == program.models, text
    assert loaded.own == program.own


@pytest.mark.parametrize("path", ['x"y.seq', "x\\y.seq", 'x\\"y.seq', 'a\\', '"', 'x\\\\"#y.seq'])
def test_import_paths_with_quotes_and_backslashes_roundtrip(path):
    """Found in review: `import "x\\"y.seq"` printed as `import "x"y.seq"`."""
    module = nodes.Module(imports=(path,), decls=(nodes.MixerDecl(name="a"),))
    text = format_module(module)
    assert typed_module(text) == module, text
    assert format_module(typed_module(text)) == text


def test_import_path_escapes():
    module = nodes.Module(imports=('x"y.seq', "x\\y.seq"))
    assert format_module(module) == 'import "x\\"y.seq"\nimport "x\\\\y.seq"\n'
