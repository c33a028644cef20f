"""V003 judges a decay by its horizon against the context, as V001 judges a window (issue 8.7);
V005 judges ALiBi, the same penalty, the same way; every decay kind is handled explicitly."""

from __future__ import annotations

import itertools
import math
import typing
from typing import Literal

import pytest

from seqdsl import loads
from seqdsl.check import RULES, check_program
from seqdsl.check.registry import MixerContext
from seqdsl.ir import nodes

RECURRENT = "weights = linear"


def check(body: str, context: int | None = None):
    text = "mixer m {\n" + body + '\n}\nmodel lm { preset = "110m" mixer = m }\n'
    return check_program(loads(text, "t.seq"), context=context)


def v(report, code="V003"):
    (d,) = [d for d in report.diagnostics if d.code == code]
    return d


def test_long_constant_decay_is_a_recency_bias_not_a_failure():
    """constant(0.9999) at 2048: the oldest token keeps 0.81 of its neighbour's weight."""
    report = check("decay = constant(0.9999)")
    d = v(report)
    assert report.verdict == "pass" and d.severity == "info"
    assert "0.9999^2047 = 0.81" in d.message and "covers the 2048-token context" in d.message


@pytest.mark.parametrize("weights,severity,verdict", [
    ("", "warning", "degraded"),  # a score bias under softmax: ALiBi's form
    (RECURRENT, "error", "fail"),  # the state forgets
])
def test_short_constant_decay_by_weights_family(weights, severity, verdict):
    report = check(f"decay = constant(0.99)\n{weights}")
    assert v(report).severity == severity and report.verdict == verdict
    assert "horizon of 1/|ln gamma| = 99.5 tokens" in v(report).message


def test_recurrent_decay_covering_the_context_still_fails_on_the_state():
    report = check(f"decay = constant(0.9999)\n{RECURRENT}")
    assert v(report).severity == "info" and report.verdict == "fail"
    assert {d.code for d in report.diagnostics if d.severity == "error"} == {"V004", "N001"}


def test_horizon_is_compared_with_the_context_like_a_window():
    """gamma = 0.999: horizon 999.5 tokens. It covers a context whose oldest token is 999 steps
    back and not one whose oldest token is 1000 steps back, as window(1000) passes at 1000."""
    assert v(check("decay = constant(0.999)", context=1000)).severity == "info"
    assert v(check("decay = constant(0.999)", context=1001)).severity == "warning"
    assert check("visibility = window(1000)", context=1000).verdict == "pass"


@pytest.mark.parametrize("heads,severity", [(3, "error"), (6, "error"), (7, "info"), (12, "info")])
def test_retnet_schedule_is_judged_by_its_longest_head(heads, severity):
    """Head h of RetNet's schedule reaches 2^(5+h) - 0.5 tokens: head 6 reaches 2047.5 >= 2047."""
    d = v(check(f"heads = {heads}\nhead_dim = 64\ndecay = constant\n{RECURRENT}"))
    assert d.severity == severity


@pytest.mark.parametrize("weights", ["", RECURRENT])
@pytest.mark.parametrize("granularity", ["scalar", "vector", "selective"])
def test_data_dependent_decay_is_explained(weights, granularity):
    d = v(check(f"decay = data_dependent({granularity})\n{weights}"))
    assert d.severity == "info" and "learned" in d.message


@pytest.mark.parametrize("context,severity", [(257, "info"), (2048, "warning")])
def test_alibi_and_the_equal_constant_decay_agree(context, severity):
    """Under softmax, ALiBi's gentlest head (slope 2^-8) and a constant decay e^(-2^-8) are the
    same score bias: the same severity at every context."""
    gamma = math.exp(-(2.0 ** -8))
    assert v(check("position = alibi", context), "V005").severity == severity
    assert v(check(f"decay = constant({gamma!r})", context)).severity == severity


def test_alibi_in_a_recurrence_is_a_constant_decay():
    assert v(check(f"position = alibi\n{RECURRENT}"), "V005").severity == "error"


# --- exhaustiveness: every decay the IR can express gets a decision -------------------------------


def _flatten(annotation) -> list:
    """The leaves of Annotated/Union type annotations."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _flatten(typing.get_args(annotation)[0])
    if origin is typing.Union:
        return [leaf for arg in typing.get_args(annotation) for leaf in _flatten(arg)]
    return [annotation]


SAMPLES = {float: [0.5, 0.9999], int: [1], nodes.Learned: [nodes.Learned(init=2.0)]}


def _instances(cls: type[nodes.Primitive]) -> list[nodes.Primitive]:
    """One instance per combination of every Literal value and a few numbers of each field."""
    choices = {}
    for name, field in cls.model_fields.items():
        if name == "kind":
            continue
        values = []
        for leaf in _flatten(field.annotation):
            literal = typing.get_origin(leaf) is Literal
            values += list(typing.get_args(leaf)) if literal else SAMPLES[leaf]
        choices[name] = values
    return [cls(**dict(zip(choices, combo))) for combo in itertools.product(*choices.values())]


DECAYS = [d for cls in _flatten(nodes.Decay) for d in _instances(cls)]
WEIGHTS = [w for cls in _flatten(nodes.Weights) for w in _instances(cls)]


def _context(decay, weights) -> MixerContext:
    loaded = loads('mixer m {}\nmodel lm { preset = "110m" mixer = m }\n', "t.seq")
    # model_copy does not validate: the rule must cope with any decay object it is handed
    mixer = loaded.program.mixer("m").model_copy(update={"decay": decay, "weights": weights})
    return MixerContext(mixer, loaded.program, loaded.sources, 2048, "model lm",
                        loaded.program.models)


def test_the_samples_cover_every_decay_kind_and_literal():
    kinds = {d.kind for d in DECAYS}
    assert kinds == {"none", "constant", "data_dependent"}
    assert {d.granularity for d in DECAYS if d.kind == "data_dependent"} == {"scalar", "vector", "selective"}
    assert {d.gamma for d in DECAYS if d.kind == "constant"} >= {"auto", 0.5}


@pytest.mark.parametrize("weights", WEIGHTS, ids=lambda w: w.kind)
@pytest.mark.parametrize("decay", DECAYS, ids=repr)
def test_every_decay_gets_a_decision(decay, weights):
    found = list(RULES["V003"].func(_context(decay, weights)))
    if isinstance(decay, nodes.NoDecay):
        assert found == []
        return
    (f,) = found
    assert f.severity in ("info", "warning", "error") and f.message and f.span is not None


def test_an_unknown_decay_kind_is_not_silently_passed():
    class Forget(nodes.Primitive):
        kind: Literal["forget"] = "forget"

    with pytest.raises(TypeError, match="V003 does not handle decay"):
        list(RULES["V003"].func(_context(Forget(), nodes.Softmax())))
