"""Canonical formatting of spec *source*: the canonical printer plus the user's comments.

The IR holds no comments (equality is structural), so `format_module` alone would drop them;
`format_source` puts each comment back next to what it was written beside:

- a whole-line comment belongs to the next item below it (an import, a declaration header, an
  assignment, or a block's closing brace) and moves with that item when assignments are put in
  canonical order;
- a trailing comment (`x = 1  # why`) stays at the end of its item's line;
- when several items share a line (`mixer a { heads = 4 }  # why`), that line's comments go to
  the first of them, so each comment is printed once;
- comments after the last item of the file stay at the end.

A leading UTF-8 byte-order mark is read past (seqdsl.parse) and not written back: the canonical
form has none, so `seqdsl fmt --write` removes it.

Blank lines inside a comment block, or between it and its item, are kept as one blank line. Comments inside a multi-line
value move to the item that follows, which is the one thing that can move a comment off its line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from seqdsl.ir.printer import INDENT, decl_header, format_assign, format_import
from seqdsl.parse.parser import BOM, parse_text
from seqdsl.passes.sourcemap import SourceMap
from seqdsl.passes.typing import Typer


@dataclass
class _Comments:
    above: dict[int, list[str]] = field(default_factory=dict)  # anchor line -> comment lines
    inline: dict[int, str] = field(default_factory=dict)  # line -> trailing comment
    tail: list[str] = field(default_factory=list)


def _comment_start(line: str) -> int | None:
    """Column of a `#` that starts a comment (not inside a string), or None.

    Inside a string a backslash escapes the next character (`\\"` and `\\\\`, as the lexer reads
    them), so `"x\\"#y"` is one string and `"x\\\\" # y` a string and a comment."""
    in_string = escaped = False
    for i, ch in enumerate(line):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "#":
            return i
    return None


def _collect(text: str, anchors: list[int]) -> _Comments:
    out = _Comments()
    pending: list[str] = []
    anchor_set = set(anchors)
    lines = text.split("\n")  # "\n" only, as the parser counts lines (not splitlines())
    for no, line in enumerate(lines, start=1):
        col = _comment_start(line)
        stripped = line.strip()
        if col is not None and line[:col].strip() and no not in anchor_set:
            # a trailing comment inside a multi-line value: it moves above the next item
            pending.append(line[col:].rstrip())
        elif col is not None and line[:col].strip():
            out.inline[no] = line[col:].rstrip()
        elif col is not None:
            pending.append(stripped)
        elif not stripped and pending and pending[-1] != "":
            pending.append("")  # keep one blank line between comment paragraphs
        if no in anchor_set and pending:
            # a trailing "" (the comments were separated from the item by a blank line, as a
            # file's header usually is) is kept and prints as one blank line
            out.above[no] = pending
            pending = []
    out.tail = pending
    while out.tail and out.tail[-1] == "":
        out.tail.pop()
    return out


def format_source(text: str, path: str = "<string>") -> str:
    """`text` in canonical form, comments kept. Raises SeqError on malformed text."""
    text = text.removeprefix(BOM)  # as the parser reads it, so a first-line comment stays one
    tree = parse_text(text, path)
    module = Typer(SourceMap()).module(tree)
    anchors = [i.span.line for i in tree.imports]
    for d in tree.decls:
        anchors += [d.span.line, d.span.end_line] + [a.span.line for a in d.assigns]
    comments = _collect(text, sorted(anchors))

    # Several items may share a line (`mixer a { heads = 4 }  # why`); that line's comments
    # belong to the first item on it in the source, so each is printed once.
    items = [(i.span.line, i.span.column, ("import", n)) for n, i in enumerate(tree.imports)]
    for n, d in enumerate(tree.decls):
        items.append((d.span.line, d.span.column, ("decl", n)))
        items += [(a.span.line, a.span.column, ("assign", n, a.key.value)) for a in d.assigns]
        items.append((d.span.end_line, d.span.end_column, ("end", n)))
    owner: dict[int, tuple] = {}
    for line_no, _, item in sorted(items, key=lambda t: t[:2]):
        owner.setdefault(line_no, item)

    def emit(out: list[str], item: tuple, line_no: int, code: str, indent: str = "") -> None:
        if owner.get(line_no) != item:
            out.append(indent + code)
            return
        for c in comments.above.get(line_no, []):
            out.append(indent + c if c else "")
        trailing = comments.inline.get(line_no)
        out.append(indent + code + (f"  {trailing}" if trailing else ""))

    parts: list[str] = []
    if tree.imports:
        block: list[str] = []
        for n, (imp, path_) in enumerate(zip(tree.imports, module.imports)):
            emit(block, ("import", n), imp.span.line, format_import(path_))
        parts.append("\n".join(block))
    for n, (src, decl) in enumerate(zip(tree.decls, module.decls)):
        block = []
        if not decl.assigns and src.span.line == src.span.end_line:
            emit(block, ("decl", n), src.span.line, decl_header(decl) + " {}")
        else:
            emit(block, ("decl", n), src.span.line, decl_header(decl) + " {")
            key_lines = {a.key.value: a.span.line for a in src.assigns}
            for a in decl.assigns:
                emit(block, ("assign", n, a.key), key_lines[a.key], format_assign(a), INDENT)
            # comments just above the closing brace stay inside the block; a comment after the
            # brace stays after it, unless the brace shares its line with an item before it
            end = src.span.end_line
            trailing = None
            if owner.get(end) == ("end", n):
                for c in comments.above.get(end, []):
                    block.append(INDENT + c if c else "")
                trailing = comments.inline.get(end)
            block.append("}" + (f"  {trailing}" if trailing else ""))
        parts.append("\n".join(block))
    if comments.tail:
        parts.append("\n".join(comments.tail))
    return "\n\n".join(parts) + "\n"
