"""The syntax tree: what the text says, with spans, before any typing.

Plain dataclasses, not IR: these exist only between the parser and the typing pass, and carry
the spans the typing pass needs for its error messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from seqdsl.errors import Span


@dataclass(frozen=True)
class Name:
    value: str
    span: Span


@dataclass(frozen=True)
class Number:
    value: Union[int, float]
    span: Span


@dataclass(frozen=True)
class String:
    value: str
    span: Span


@dataclass(frozen=True)
class Bool:
    value: bool
    span: Span


@dataclass(frozen=True)
class Kwarg:
    key: Name
    value: "Expr"


@dataclass(frozen=True)
class Call:
    name: Name
    args: tuple["Expr", ...]
    kwargs: tuple[Kwarg, ...]
    span: Span


@dataclass(frozen=True)
class List:
    items: tuple["Expr", ...]
    span: Span


Expr = Union[Name, Number, String, Bool, Call, List]


@dataclass(frozen=True)
class Assign:
    key: Name
    value: Expr
    span: Span


@dataclass(frozen=True)
class Decl:
    keyword: str  # "mixer" or "model"
    name: Name
    extends: Name | None
    assigns: tuple[Assign, ...]
    span: Span


@dataclass(frozen=True)
class Import:
    path: String
    span: Span


@dataclass(frozen=True)
class File:
    path: str
    imports: tuple[Import, ...] = ()
    decls: tuple[Decl, ...] = field(default_factory=tuple)
