"""Hypothesis strategies for random valid IR, read off the pydantic classes themselves.

Every slot's annotation (a union of primitive classes, literals, constrained numbers) becomes a
strategy, so a primitive added to seqdsl/ir/nodes.py is fuzzed without touching this file.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal, Union

import annotated_types as at
from hypothesis import strategies as st
from pydantic.fields import FieldInfo

from seqdsl.ir import nodes
from seqdsl.passes.typing import RESERVED

identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True).filter(
    lambda s: s not in RESERVED)


def _bounds(metadata) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in metadata:
        if isinstance(m, FieldInfo):
            out.update(_bounds(m.metadata))
        elif isinstance(m, at.Gt):
            out["gt"] = m.gt
        elif isinstance(m, at.Ge):
            out["ge"] = m.ge
        elif isinstance(m, at.Lt):
            out["lt"] = m.lt
        elif isinstance(m, at.Le):
            out["le"] = m.le
    return out


def _number(kind: type, b: dict[str, Any]) -> st.SearchStrategy:
    if kind is int:
        lo = b["gt"] + 1 if "gt" in b else b.get("ge", -(10 ** 6))
        hi = b["lt"] - 1 if "lt" in b else b.get("le", 10 ** 6)
        return st.integers(lo, hi)
    lo = b.get("gt", b.get("ge"))
    hi = b.get("lt", b.get("le"))
    return st.floats(min_value=lo, max_value=hi, exclude_min="gt" in b, exclude_max="lt" in b,
                     allow_nan=False, allow_infinity=False)


def for_annotation(annotation: Any, metadata=()) -> st.SearchStrategy:
    """A strategy for values of a field annotation (with its pydantic constraints)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        inner, *extra = typing.get_args(annotation)
        return for_annotation(inner, list(metadata) + extra)
    if origin is Union:
        return st.one_of([for_annotation(a) for a in typing.get_args(annotation)])
    if origin is Literal:
        return st.sampled_from(typing.get_args(annotation))
    if origin is tuple:  # a model's mixer names
        return st.lists(identifiers, min_size=1, max_size=4).map(tuple)
    if annotation is bool:
        return st.booleans()
    if annotation in (int, float):
        return _number(annotation, _bounds(metadata))
    if annotation is str:
        return st.sampled_from(nodes.PRESETS)
    if isinstance(annotation, type) and issubclass(annotation, nodes.Primitive):
        return primitive(annotation)
    raise TypeError(f"no strategy for {annotation!r}")


def field_strategy(cls: type[nodes.Node], name: str) -> st.SearchStrategy:
    info = cls.model_fields[name]
    return for_annotation(info.annotation, info.metadata)


def primitive(cls: type[nodes.Primitive]) -> st.SearchStrategy:
    fields = {n: field_strategy(cls, n) for n in cls.model_fields if n != "kind"}
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


def _assigns(cls: type[nodes.Node], keys: tuple[str, ...]) -> st.SearchStrategy:
    """A canonical-order subset of the keys, each with a random value."""

    @st.composite
    def build(draw):
        chosen = [k for k in keys if draw(st.booleans())]
        out = []
        for key in chosen:
            value = (draw(st.sampled_from(nodes.PRESETS)) if key == "preset"
                     else draw(field_strategy(cls, key)))
            out.append(nodes.Assign(key=key, value=value))
        return tuple(out)

    return build()


mixer_decls = st.builds(nodes.MixerDecl, name=identifiers, extends=st.none() | identifiers,
                        assigns=_assigns(nodes.Mixer, nodes.MIXER_SLOTS))
model_decls = st.builds(nodes.ModelDecl, name=identifiers, extends=st.none() | identifiers,
                        assigns=_assigns(nodes.Model, ("preset",) + nodes.MODEL_SLOTS))
# `"` and `\` need escaping in a string literal; `#` must not start a comment inside one.
import_paths = st.from_regex(r'[A-Za-z0-9_./\-"\\# ]{1,16}\.seq', fullmatch=True)
modules = st.builds(nodes.Module, imports=st.lists(import_paths, max_size=3).map(tuple),
                    decls=st.lists(mixer_decls | model_decls, max_size=5).map(tuple))


def mixers(name: str) -> st.SearchStrategy:
    fields = {n: field_strategy(nodes.Mixer, n) for n in nodes.MIXER_SLOTS}
    return st.fixed_dictionaries({}, optional=fields).map(lambda kw: nodes.Mixer(name=name, **kw))


@st.composite
def programs(draw) -> nodes.Program:
    """A resolvable program: unique names, models that use declared mixers."""
    names = draw(st.lists(identifiers, min_size=1, max_size=4, unique=True))
    ms = tuple(draw(mixers(n)) for n in names)
    model_names = draw(st.lists(identifiers, max_size=3, unique=True))
    models = []
    for name in model_names:
        fields = {n: field_strategy(nodes.Model, n) for n in nodes.MODEL_SLOTS}
        fields["mixer"] = st.lists(st.sampled_from(names), min_size=1, max_size=4).map(tuple)
        required = {k: fields.pop(k) for k in ("layers", "d_model", "vocab", "mixer")}
        kw = draw(st.fixed_dictionaries(required, optional=fields))
        models.append(nodes.Model(name=name, **kw))
    return nodes.Program(mixers=ms, models=tuple(models), own=tuple(names) + tuple(model_names))
