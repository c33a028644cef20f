"""The support tables (seqdsl/ir/support.py) are the one statement of what each fast backend
accepts: the planner and the checker's backend rules both read them, and must agree."""

from __future__ import annotations

import pytest

from seqdsl import load
from seqdsl.check import check_program
from seqdsl.ir import nodes, support
from seqdsl.ir.key import kernel_key
from seqdsl.lower.paths import PathChooser
from tests.spec_library import SPEC_FILES, SPEC_IDS


def _linear(**kw) -> nodes.Mixer:
    return nodes.Mixer(name="m", weights=nodes.Linear(), **kw)


VECTOR = nodes.DataDependentDecay(granularity="vector")
SCALAR = nodes.DataDependentDecay(granularity="scalar")


@pytest.mark.parametrize("op, mixer", [
    ("fla.chunk_simple_gla", _linear(decay=SCALAR)),
    ("fla.chunk_simple_gla", _linear(position=nodes.Alibi())),  # ALiBi: a per-head decay
    ("fla.chunk_gla", _linear(decay=VECTOR)),
    ("fla.chunk_rwkv6", _linear(decay=VECTOR, update=nodes.Additive(bonus=True))),
    ("fla.chunk_rwkv7", _linear(decay=VECTOR, update=nodes.Rwkv7())),
    ("fla.chunk_delta_rule", _linear(update=nodes.Delta())),
    ("fla.chunk_gated_delta_rule", _linear(decay=SCALAR, update=nodes.Delta())),
    ("fla.chunk_gated_delta_rule", _linear(update=nodes.Delta(), position=nodes.Alibi())),
])
def test_fla_op_follows_the_update_rule_and_the_decay_shape(op, mixer):
    assert support.fla(kernel_key(mixer, 64)) == support.Support("fla", op)


def test_fla_refuses_tiles_narrower_than_16_and_says_so():
    mamba1 = _linear(decay=VECTOR, head_dim=1, key_dim=16, heads=64)
    verdict = support.fla(kernel_key(mamba1, 64))
    assert not verdict.ok and "16-wide" in verdict.reason


def test_triton_table_names_what_rules_a_top1_mixer_out():
    top = lambda **kw: nodes.Mixer(name="m", select=nodes.Top(**kw))
    assert support.triton(kernel_key(top(), 64)).op == "triton.top1_element"
    assert support.triton(kernel_key(top(over=nodes.Chunk(size=128)), 64)).op == "triton.top1_chunk"
    assert "k = 1" in support.triton(kernel_key(top(k=2), 64)).reason
    odd = support.triton(kernel_key(top(over=nodes.Chunk(size=100)), 64))
    assert odd.tiling and "power of two" in odd.reason
    assert "lse" in support.triton(kernel_key(top(over=nodes.Chunk(size=64), score="lse"), 64)).reason


def _own_mixers(path):
    loaded = load(path)
    program = loaded.program
    model = [m for m in program.models if m.name in program.own][-1]
    return loaded, model, [program.mixer(name) for name in dict.fromkeys(model.mixer)]


@pytest.mark.parametrize("path", SPEC_FILES, ids=SPEC_IDS)
def test_planner_and_checker_read_the_same_table(path):
    """For every library spec: where the table refuses every fast backend, the planner's
    reason is the table's and the checker warns (W002/W003); where the table accepts one, the
    checker is silent about speed and the planner either takes that op or names the run-time
    fact (not importable here, known refusal) that stops it."""
    loaded, model, mixers = _own_mixers(path)
    report = check_program(loaded)
    for mixer in mixers:
        key = kernel_key(mixer, model.d_model)
        verdicts = support.fast_paths(key)
        plan = PathChooser(key, mixer.name).plan("cuda")
        warned = {d.code for d in report.diagnostics if d.code in ("W002", "W003") and d.subject == mixer.name}
        if any(v.ok for v in verdicts):
            assert not warned, (mixer.name, warned)
            ops = {v.op for v in verdicts if v.ok}
            assert plan.path in ops or plan.path.startswith("reference") and plan.reason, plan
        else:
            assert plan.path.startswith("reference") and plan.reason == verdicts[0].reason
            assert warned, mixer.name
