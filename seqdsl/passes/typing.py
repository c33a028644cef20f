"""Syntax tree -> typed `Module`: every assignment checked against the IR.

The grammar accepts any `key = value`; this pass knows what each key means. It reads the types
straight off the pydantic IR classes (a slot's annotation is a union of primitive classes, each
with a `kind` literal and parameters), so adding a primitive to `seqdsl/ir/nodes.py` is all it
takes for the language to accept it, with argument binding, defaults, range checks and
"did you mean" suggestions for free.
"""

from __future__ import annotations

import math
import typing
from typing import Any, Literal, Union

import pydantic

from seqdsl.errors import SeqSemanticError, Span, did_you_mean, one_of
from seqdsl.ir import nodes
from seqdsl.parse import ast
from seqdsl.passes.sourcemap import SourceMap

RESERVED = frozenset({"true", "false", "mixer", "model", "import", "extends"})

# What users write for architectures the language cannot express yet: each gets a message naming
# the limitation (docs/roadmap.md says what comes next) instead of "unknown field/value".
_MULTI_BRANCH = ("multi-branch mixers (NSA's compressed + selected + window branches, merged by "
                 "gates) are not in the language yet: a mixer has one relation, visibility and "
                 "selection")
_LONG_CONV = ("long convolutions (Hyena-style: an implicit filter as long as the sequence, applied "
              "by FFT) are not in the language yet: `conv` is a short depthwise causal convolution")
NOT_YET_FIELDS = {name: _MULTI_BRANCH for name in ("branches", "branch", "merge", "gates")}
NOT_YET_VALUES = {
    "conv": {name: _LONG_CONV for name in ("long", "hyena", "implicit", "fft", "long_conv")},
    "*": {name: _MULTI_BRANCH for name in ("nsa", "compressed", "compress", "branches")},
}
ROADMAP_HINT = "see docs/roadmap.md for how they will fit"
MODEL_KEYS: tuple[str, ...] = ("preset",) + nodes.MODEL_SLOTS


def _strip(annotation: Any) -> Any:
    """Drop `Annotated[...]` wrappers."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _options(annotation: Any) -> list[Any]:
    annotation = _strip(annotation)
    if typing.get_origin(annotation) is Union:
        return [_strip(a) for a in typing.get_args(annotation)]
    return [annotation]


def _is_primitive(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, nodes.Primitive)


def _kind(cls: type[nodes.Primitive]) -> str:
    return cls.model_fields["kind"].default


def params(cls: type[nodes.Primitive]) -> list[str]:
    """A primitive's parameters, in the order positional arguments bind to them."""
    return [f for f in cls.model_fields if f != "kind"]


def describe(annotation: Any) -> str:
    """What a slot accepts, in the language's words (for error messages and docs)."""
    words = []
    for opt in _options(annotation):
        if _is_primitive(opt):
            words.append(f"`{_kind(opt)}`")
        elif typing.get_origin(opt) is Literal:
            words.extend(f"`{a}`" for a in typing.get_args(opt))
        elif opt is bool:
            words.extend(["`true`", "`false`"])
        elif opt is int:
            words.append("a whole number")
        elif opt is float:
            words.append("a number")
        elif opt is str:
            words.append('a "string"')
        else:
            words.append("a list of names")
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


class Typer:
    """Types one file. Spans of every assignment and argument go into `sources`."""

    def __init__(self, sources: SourceMap):
        self.sources = sources

    # --- declarations ----------------------------------------------------------------------------

    def module(self, file: ast.File) -> nodes.Module:
        decls = tuple(self.decl(d) for d in file.decls)
        return nodes.Module(imports=tuple(i.path.value for i in file.imports), decls=decls)

    def decl(self, d: ast.Decl) -> nodes.MixerDecl | nodes.ModelDecl:
        if d.name.value in RESERVED:
            raise SeqSemanticError(f"`{d.name.value}` is a reserved word and cannot name a {d.keyword}",
                                   d.name.span, "choose another name")
        self.sources.add((d.keyword, d.name.value), d.name.span)
        if d.extends is not None:
            self.sources.add((d.keyword, d.name.value, "extends"), d.extends.span)
        seen: dict[str, Span] = {}
        assigns = []
        for a in d.assigns:
            key = a.key.value
            if key in seen:
                raise SeqSemanticError(f"`{key}` is assigned twice in {d.keyword} `{d.name.value}`",
                                       a.key.span, f"the first assignment is at line {seen[key].line}; keep one")
            seen[key] = a.key.span
            assigns.append(self.assign(d, a))
        cls = nodes.MixerDecl if d.keyword == "mixer" else nodes.ModelDecl
        keys = nodes.MIXER_SLOTS if d.keyword == "mixer" else MODEL_KEYS
        extends = d.extends.value if d.extends else None
        return cls(name=d.name.value, extends=extends, assigns=tuple(sorted(assigns, key=_slot_order(keys))))

    def assign(self, d: ast.Decl, a: ast.Assign) -> nodes.Assign:
        key = a.key.value
        keys = nodes.MIXER_SLOTS if d.keyword == "mixer" else MODEL_KEYS
        if key not in keys and d.keyword == "mixer" and key in NOT_YET_FIELDS:
            raise SeqSemanticError(f"`{key}`: {NOT_YET_FIELDS[key]}", a.key.span, ROADMAP_HINT)
        if key not in keys:
            hint = did_you_mean(key, keys) or f"a {d.keyword} block sets {one_of(keys)}"
            raise SeqSemanticError(f"unknown {d.keyword} field `{key}`", a.key.span, hint)
        path = (d.keyword, d.name.value, key)
        self.sources.add(path, a.span)
        if key == "preset":
            value = self.preset(a.value)
        else:
            owner = nodes.Mixer if d.keyword == "mixer" else nodes.Model
            value = self.value(a.value, owner.model_fields[key].annotation, key, path)
        return nodes.Assign(key=key, value=value)

    def preset(self, expr: ast.Expr) -> str:
        if isinstance(expr, (ast.String, ast.Name)) and expr.value in nodes.PRESETS:
            return expr.value
        got = getattr(expr, "value", None)
        hint = did_you_mean(str(got), nodes.PRESETS) if isinstance(got, str) else None
        raise SeqSemanticError(f"unknown preset {_show(expr)}", expr.span,
                               hint or f"presets are {one_of(nodes.PRESETS)} (as strings: \"110m\")")

    # --- values ----------------------------------------------------------------------------------

    def value(self, expr: ast.Expr, annotation: Any, what: str, path: tuple[str, ...]) -> Any:
        options = _options(annotation)
        prims = [o for o in options if _is_primitive(o)]
        if prims and isinstance(expr, (ast.Name, ast.Call)):
            name = expr.value if isinstance(expr, ast.Name) else expr.name.value
            by_kind = {_kind(p): p for p in prims}
            if name in by_kind:
                return self.primitive(expr, by_kind[name], path)
            if isinstance(expr, ast.Call) or not _literal_accepts(options, name):
                span = expr.span if isinstance(expr, ast.Name) else expr.name.span
                limitation = NOT_YET_VALUES.get(what, {}).get(name) or NOT_YET_VALUES["*"].get(name)
                if limitation:
                    raise SeqSemanticError(f"`{what} = {name}`: {limitation}", span, ROADMAP_HINT)
                hint = did_you_mean(name, by_kind) or f"`{what}` takes {describe(annotation)}"
                raise SeqSemanticError(f"unknown {what} `{name}`", span, hint)
        for opt in options:
            got = _scalar(expr, opt)
            if got is not _NO:
                return got
        if typing.get_origin(_strip(annotation)) is tuple:
            return self.names(expr, what)
        raise SeqSemanticError(f"`{what}` takes {describe(annotation)}, got {_show(expr)}", expr.span,
                               _type_hint(expr, options))

    def names(self, expr: ast.Expr, what: str) -> tuple[str, ...]:
        items = expr.items if isinstance(expr, ast.List) else (expr,)
        if not items:
            raise SeqSemanticError(f"`{what}` needs at least one name", expr.span)
        for item in items:
            if not isinstance(item, ast.Name):
                raise SeqSemanticError(f"`{what}` takes mixer names, got {_show(item)}", item.span,
                                       "write `mixer = NAME` or `mixer = [NAME, NAME]`")
        return tuple(i.value for i in items)

    def primitive(self, expr: ast.Name | ast.Call, cls: type[nodes.Primitive], path) -> nodes.Primitive:
        kind = _kind(cls)
        names = params(cls)
        bound: dict[str, ast.Expr] = {}
        if isinstance(expr, ast.Call):
            if len(expr.args) > len(names):
                takes = f"{len(names)} argument{'s' if len(names) != 1 else ''}"
                listing = f" ({', '.join(names)})" if names else ""
                raise SeqSemanticError(f"`{kind}` takes {takes}{listing}, got {len(expr.args)}",
                                       expr.args[len(names)].span, _signature_hint(cls))
            bound.update(zip(names, expr.args))
            for kw in expr.kwargs:
                key = kw.key.value
                if key not in names:
                    hint = did_you_mean(key, names) or _signature_hint(cls)
                    raise SeqSemanticError(f"`{kind}` has no parameter `{key}`", kw.key.span, hint)
                if key in bound:
                    raise SeqSemanticError(f"`{kind}` got `{key}` twice", kw.key.span, _signature_hint(cls))
                bound[key] = kw.value
        for name in names:
            if name not in bound and cls.model_fields[name].is_required():
                raise SeqSemanticError(f"`{kind}` needs `{name}`", expr.span, _signature_hint(cls))
        values = {}
        for name, arg in bound.items():
            self.sources.add(path + (name,), arg.span)
            values[name] = self.value(arg, cls.model_fields[name].annotation, f"{kind}.{name}", path + (name,))
        try:
            return cls(**values)
        except pydantic.ValidationError as err:
            first = err.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else names[0]
            span = bound[name].span if name in bound else expr.span
            raise SeqSemanticError(f"`{kind}` {name}: {pydantic_message(first)}", span,
                                   _signature_hint(cls)) from None


_NO = object()


def pydantic_message(error: dict) -> str:
    if error["type"] == "value_error":  # the IR's own validators write whole sentences
        return str(error["ctx"]["error"])
    return error["msg"].lower().replace("input should be", "must be")


def _slot_order(keys: tuple[str, ...]):
    """Assignments are kept in canonical slot order: order carries no meaning (a key may be
    assigned once), and a canonical order makes `parse(format(m)) == m` hold for any input."""
    return lambda a: keys.index(a.key)


def _literal_accepts(options: list[Any], name: str) -> bool:
    return any(typing.get_origin(o) is Literal and name in typing.get_args(o) for o in options)


def _scalar(expr: ast.Expr, opt: Any) -> Any:
    """`expr` as a value of scalar type `opt`, or _NO when it is not one."""
    if typing.get_origin(opt) is Literal:
        if isinstance(expr, ast.Name) and expr.value in typing.get_args(opt):
            return expr.value
        return _NO
    if opt is bool:
        return expr.value if isinstance(expr, ast.Bool) else _NO
    if opt is int:
        return expr.value if isinstance(expr, ast.Number) and isinstance(expr.value, int) else _NO
    if opt is float:
        if isinstance(expr, ast.Number):
            if not math.isfinite(float(expr.value)):
                raise SeqSemanticError("number out of range", expr.span, "write a finite number")
            return float(expr.value)
        return _NO
    if opt is str:
        return expr.value if isinstance(expr, ast.String) else _NO
    return _NO


def _show(expr: ast.Expr) -> str:
    if isinstance(expr, ast.Call):
        return f"`{expr.name.value}(...)`"
    if isinstance(expr, ast.List):
        return "a list"
    if isinstance(expr, ast.String):
        return f'"{expr.value}"'
    if isinstance(expr, ast.Bool):
        return f"`{str(expr.value).lower()}`"
    return f"`{expr.value}`"


def _type_hint(expr: ast.Expr, options: list[Any]) -> str | None:
    if isinstance(expr, ast.Number) and isinstance(expr.value, float) and int in options:
        return "this takes a whole number"
    if isinstance(expr, ast.Name):
        words = [a for o in options if typing.get_origin(o) is Literal for a in typing.get_args(o)]
        return did_you_mean(expr.value, words)
    return None


def _signature_hint(cls: type[nodes.Primitive]) -> str:
    parts = []
    for name in params(cls):
        field = cls.model_fields[name]
        if field.is_required():
            parts.append(name)
        else:
            default = field.default
            shown = getattr(default, "kind", default)
            shown = str(shown).lower() if isinstance(shown, bool) else shown
            parts.append(f"{name}={shown}")
    return f"signature: {_kind(cls)}({', '.join(parts)})"
