"""Errors and source spans shared by every stage.

Every user-facing failure is a `SeqError`: it carries a message, the span of the offending text
and an optional hint, and renders as `file:line:col: error: message`, the source line, a caret
under the offending text, and the hint. The CLI prints `render()` and exits 2; nothing else
reaches the user, in particular no Python traceback.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Span:
    """Where a piece of text sits: 1-based line and column, end exclusive, plus the line's text
    so a diagnostic can be rendered without re-reading the file."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int
    line_text: str = ""

    def location(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def render_snippet(span: Span) -> str:
    """The source line with a caret run under the span (clipped to the first line)."""
    text = span.line_text.rstrip("\n")
    if not text:
        return ""
    start = max(span.column - 1, 0)
    stop = span.end_column - 1 if span.end_line == span.line else len(text)
    width = max(stop - start, 1)
    gutter = f"{span.line:>4} | "
    return f"{gutter}{text}\n{' ' * len(gutter)}{' ' * start}{'^' * width}"


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A 'did you mean' hint for typos, or None when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None


def one_of(choices: Iterable[str]) -> str:
    names = [f"`{c}`" for c in choices]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


@dataclass(frozen=True)
class Note:
    """A second place an error involves (the other declaration of a clashing name...)."""

    message: str
    span: Span | None = None


def _located(kind: str, message: str, span: Span | None) -> list[str]:
    where = f"{span.location()}: " if span else ""
    parts = [f"{where}{kind}: {message}"]
    snippet = render_snippet(span) if span else ""
    if snippet:
        parts.append(snippet)
    return parts


class SeqError(Exception):
    """A user error: bad spec text, a missing file, an impossible request."""

    kind = "error"

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None,
                 notes: tuple[Note, ...] = ()):
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint
        self.notes = tuple(notes)

    def render(self) -> str:
        parts = _located(self.kind, self.message, self.span)
        for note in self.notes:
            parts += _located("note", note.message, note.span)
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.render()


class SeqSyntaxError(SeqError):
    """The text does not follow the grammar."""

    kind = "syntax error"


class SeqSemanticError(SeqError):
    """The text parses but does not mean anything: unknown primitive, wrong argument, cycle..."""

    kind = "error"


class SeqFileError(SeqError):
    """A file cannot be read (missing, unreadable, not UTF-8)."""

    kind = "error"
