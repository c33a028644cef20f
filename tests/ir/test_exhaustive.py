"""Every case of the IR is handled, or listed as unsupported with a reason.

The cases are enumerated from the IR itself (every primitive class of every mixer slot, and every
value of every `Literal` parameter of those classes), so a new primitive or a new literal value
is picked up here without editing this file. For each case, in a softmax host mixer and two
linear-weights ones (features that keep the key width, and taylor's, which widens it):

- either `seqdsl.ir.conflicts` lists it with a reason (and the lowering refuses to build it),
- or it is handled everywhere: the kernel key is computed, every backend's support table
  answers (an op, or a reason in words), the checker runs its rules on it, and the lowering
  plans it (`seqdsl.ir.plan`, whose every match ends in `assert_never`), builds it and runs a
  forward and a backward pass.
"""

from __future__ import annotations

import typing
from typing import Literal, Union, get_args, get_origin

import pytest
import torch

from seqdsl import loads
from seqdsl.check import check_program
from seqdsl.ir import nodes, support
from seqdsl.ir.conflicts import conflicts
from seqdsl.ir.key import kernel_key
from seqdsl.ir.printer import format_program
from seqdsl.lower.mixer import LoweringError, MixerModule


def _union_members(annotation) -> list[type]:
    """The primitive classes of a slot annotation `Annotated[Union[A, B], ...]`."""
    while get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Union:
        return [a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, nodes.Primitive)]
    return []


def _literal_values(annotation) -> list:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    if get_origin(annotation) is Union:
        return [v for a in get_args(annotation) for v in _literal_values(a)]
    return []


def _variants(cls: type[nodes.Primitive]) -> list[nodes.Primitive]:
    """The class with its defaults, then once per other value of each Literal parameter, and
    once with each optional whole-number parameter moved off its default (a window's sink,
    top's k)."""
    # a required size gets a small value that bites at the test's length
    base = cls(**{name: 4 for name, f in cls.model_fields.items() if f.is_required()})
    out = [base]
    for name, field in cls.model_fields.items():
        if name == "kind":
            continue
        for value in _literal_values(field.annotation):
            if value != getattr(base, name) and value != "auto":
                out.append(base.model_copy(update={name: value}))
        if field.annotation is int and not field.is_required():
            out.append(cls.model_validate({**base.model_dump(), name: field.default + 2}))
    for name, field in cls.model_fields.items():  # nested primitives (top's `over`)
        for member in _union_members(field.annotation):
            if not isinstance(getattr(base, name), member):
                out.extend(base.model_copy(update={name: v}) for v in _variants(member))
    return out


HOSTS = {
    "softmax": nodes.Mixer(name="m", heads=2, head_dim=16),
    "linear": nodes.Mixer(name="m", heads=2, head_dim=16, weights=nodes.Linear(),
                          relation=nodes.Dot(feature="elu1")),
    # taylor features widen the keys to 1 + d + d^2 channels: what is sized per key channel breaks
    "taylor": nodes.Mixer(name="m", heads=2, head_dim=4, weights=nodes.Linear(),
                          relation=nodes.Dot(feature="taylor")),
}

CASES = [
    (slot, host, value)
    for slot in nodes.MIXER_SLOTS
    for member in _union_members(nodes.Mixer.model_fields[slot].annotation)
    for value in _variants(member)
    for host in HOSTS
]


def _id(case) -> str:
    slot, host, value = case
    args = ",".join(f"{k}={v}" for k, v in value.model_dump().items() if k != "kind")
    return f"{host}:{slot}={value.kind}({args})"


def test_the_enumeration_reaches_every_slot_and_class():
    slots = {slot for slot, _, _ in CASES}
    assert slots == {s for s in nodes.MIXER_SLOTS if _union_members(nodes.Mixer.model_fields[s].annotation)}
    kinds = {(slot, type(v)) for slot, _, v in CASES}
    assert (("select", nodes.Top) in kinds) and (("decay", nodes.DataDependentDecay) in kinds)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_every_ir_case_is_handled_or_refused_with_a_reason(case):
    slot, host, value = case
    mixer = HOSTS[host].model_copy(update={slot: value})
    mixer = nodes.Mixer.model_validate(mixer.model_dump())  # the copy re-validated
    found = conflicts(mixer)
    if found:
        assert all(c.message and c.fix for c in found)
        with pytest.raises(LoweringError):
            MixerModule(mixer, 32, context=64)
        return

    # the kernel key and every backend's support table
    key = kernel_key(mixer, 32)
    for table in support.TABLES:
        verdict = table(key)
        assert verdict.ok or verdict.reason, (table.__name__, key)
    assert support.fast_paths(key)

    # the checker: every rule runs on it (a model fixes the context)
    model = nodes.Model(name="lm", layers=1, d_model=32, vocab=64, context=64, mixer=("m",))
    text = format_program(nodes.Program(mixers=(mixer,), models=(model,), own=("m", "lm")))
    report = check_program(loads(text, "case.seq"))
    assert report.verdict in ("pass", "degraded", "fail")

    # the lowering: builds, runs forward and backward
    torch.manual_seed(0)
    module = MixerModule(mixer, 32, context=64).double()
    x = torch.randn(2, 11, 32, dtype=torch.float64, requires_grad=True)
    out, _ = module(x)
    assert out.shape == x.shape and torch.isfinite(out).all()
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all()
