"""Text -> syntax tree. The only module that imports lark.

Lark's exceptions never escape: every failure becomes a `SeqSyntaxError` that names what was
expected in the language's own words, points at the text with a caret, and, for the common
mistakes (missing brace, missing `=`, misspelt keyword, unclosed parenthesis), says what to do.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path

import lark
from lark import Lark, Token, Transformer, v_args

from seqdsl.errors import SeqSyntaxError, Span, did_you_mean
from seqdsl.parse import ast

# Terminal names as a reader knows them, for "expected ..." messages.
_TERMINAL_WORDS = {
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": 'a "string"',
    "LBRACE": "`{`",
    "RBRACE": "`}`",
    "LPAR": "`(`",
    "RPAR": "`)`",
    "LSQB": "`[`",
    "RSQB": "`]`",
    "EQUAL": "`=`",
    "COMMA": "`,`",
    "SEMICOLON": "`;`",
    "MIXER": "`mixer`",
    "MODEL": "`model`",
    "IMPORT": "`import`",
    "EXTENDS": "`extends`",
    "TRUE": "`true`",
    "FALSE": "`false`",
    "$END": "end of file",
}
_TOP_KEYWORDS = ("mixer", "model", "import")
BOM = "\ufeff"


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    try:  # installed: grammar/ ships as seqdsl.grammar
        grammar = resources.files("seqdsl.grammar").joinpath("seq.lark").read_text(encoding="utf-8")
    except ModuleNotFoundError:  # a source checkout on sys.path, not installed
        grammar = (Path(__file__).resolve().parents[2] / "grammar" / "seq.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=False)


class _Lines:
    r"""Line lookup for building spans that carry their line's text.

    Lines are split at "\n" only, as lark and the bracket scans count them: `str.splitlines()`
    also breaks at \f, \v, \x1c-\x1e, \x85, \u2028 and \u2029, which would put every span after
    such a character on the wrong line. One trailing "\r" per line (CRLF) is dropped for display."""

    def __init__(self, text: str, path: str):
        self.lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
        # the last line a reader sees: text ending in "\n" has no line after it
        self.last = len(self.lines) - 1 if len(self.lines) > 1 and text.endswith("\n") else len(self.lines)
        self.path = path

    def span(self, line: int, column: int, end_line: int, end_column: int) -> Span:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return Span(self.path, line, column, end_line, end_column, text)

    def of_token(self, tok: Token) -> Span:
        end_line = tok.end_line or tok.line
        end_col = tok.end_column or (tok.column + len(str(tok)))
        return self.span(tok.line, tok.column, end_line, end_col)

    def of_meta(self, meta) -> Span:
        return self.span(meta.line, meta.column, meta.end_line, meta.end_column)


class _ToAst(Transformer):
    def __init__(self, lines: _Lines):
        super().__init__()
        self.lines = lines

    def _name(self, tok: Token) -> ast.Name:
        return ast.Name(str(tok), self.lines.of_token(tok))

    @v_args(meta=True)
    def start(self, meta, items):
        imports = tuple(i for i in items if isinstance(i, ast.Import))
        decls = tuple(i for i in items if isinstance(i, ast.Decl))
        return ast.File(self.lines.path, imports, decls)

    @v_args(meta=True)
    def import_stmt(self, meta, children):
        (tok,) = children
        return ast.Import(ast.String(_unquote(tok), self.lines.of_token(tok)), self.lines.of_meta(meta))

    def extends(self, children):
        return self._name(children[0])

    def _decl(self, keyword, meta, children):
        name = self._name(children[0])
        rest = children[1:]
        extends = rest[0] if rest and isinstance(rest[0], ast.Name) else None
        assigns = tuple(c for c in rest if isinstance(c, ast.Assign))
        return ast.Decl(keyword, name, extends, assigns, self.lines.of_meta(meta))

    @v_args(meta=True)
    def mixer_decl(self, meta, children):
        return self._decl("mixer", meta, children)

    @v_args(meta=True)
    def model_decl(self, meta, children):
        return self._decl("model", meta, children)

    @v_args(meta=True)
    def assign(self, meta, children):
        return ast.Assign(self._name(children[0]), children[1], self.lines.of_meta(meta))

    @v_args(meta=True)
    def call(self, meta, children):
        name = self._name(children[0])
        args = tuple(c for c in children[1:] if not isinstance(c, ast.Kwarg))
        kwargs = tuple(c for c in children[1:] if isinstance(c, ast.Kwarg))
        return ast.Call(name, args, kwargs, self.lines.of_meta(meta))

    def kwarg(self, children):
        return ast.Kwarg(self._name(children[0]), children[1])

    @v_args(meta=True)
    def list(self, meta, children):
        return ast.List(tuple(children), self.lines.of_meta(meta))

    def name(self, children):
        return self._name(children[0])

    def number(self, children):
        (tok,) = children
        text = str(tok)
        is_int = not any(c in text for c in ".eE")
        return ast.Number(int(text) if is_int else float(text), self.lines.of_token(tok))

    def string(self, children):
        (tok,) = children
        return ast.String(_unquote(tok), self.lines.of_token(tok))

    @v_args(meta=True)
    def true(self, meta, children):
        return ast.Bool(True, self.lines.of_meta(meta))

    @v_args(meta=True)
    def false(self, meta, children):
        return ast.Bool(False, self.lines.of_meta(meta))


def _unquote(tok: Token) -> str:
    return str(tok)[1:-1].replace('\\"', '"').replace("\\\\", "\\")


def parse_text(text: str, path: str = "<string>") -> ast.File:
    """Parse spec text into a syntax tree; raise `SeqSyntaxError` on any malformed input.

    A leading UTF-8 byte-order mark (which some Windows editors write) is not part of the text:
    it is dropped, so columns on the first line count from the first real character."""
    text = text.removeprefix(BOM)
    lines = _Lines(text, path)
    _check_depth(text, lines)
    try:
        tree = _lark().parse(text)
    except lark.exceptions.UnexpectedInput as err:
        raise _explain(err, text, lines) from None
    except lark.exceptions.LarkError as err:  # pragma: no cover - defensive: lark internals
        raise SeqSyntaxError(f"could not parse: {err}", lines.span(1, 1, 1, 2)) from None
    return _ToAst(lines).transform(tree)


# Deeper nesting than any spec needs; the tree transformer and the typing pass recurse once per
# level, so an absurd depth (fuzzed input) would otherwise end in Python's RecursionError.
MAX_DEPTH = 32


def _check_depth(text: str, lines: _Lines) -> None:
    depth, line, col, in_comment, in_string = 0, 1, 1, False, False
    for ch in text:
        if in_comment:
            in_comment = ch != "\n"
        elif in_string:
            in_string = ch not in '"\n'
        elif ch == "#":
            in_comment = True
        elif ch == '"':
            in_string = True
        elif ch in "{([":
            depth += 1
            if depth > MAX_DEPTH:
                raise SeqSyntaxError(f"brackets nested more than {MAX_DEPTH} deep",
                                     lines.span(line, col, line, col + 1), "no spec needs this much nesting")
        elif ch in "})]":
            depth = max(depth - 1, 0)
        if ch == "\n":
            line, col = line + 1, 1
        else:
            col += 1


# --- turning lark's errors into the language's own words -----------------------------------------


def _expected_words(expected) -> list[str]:
    words = sorted({_TERMINAL_WORDS.get(t, f"`{t}`") for t in expected if not t.startswith("__")})
    return words


def _open_brackets(text: str) -> list[tuple[str, int, int, int]]:
    """[(bracket, offset, line, column)] of the `{`/`(`/`[` still open at the end of `text`,
    outermost first; brackets inside comments and strings do not count."""
    stack: list[tuple[str, int, int, int]] = []
    line, col, in_comment, in_string = 1, 1, False, False
    pairs = {"}": "{", ")": "(", "]": "["}
    for offset, ch in enumerate(text):
        if in_comment:
            in_comment = ch != "\n"
        elif in_string:
            in_string = ch != '"'
        elif ch == "#":
            in_comment = True
        elif ch == '"':
            in_string = True
        elif ch in "{([":
            stack.append((ch, offset, line, col))
        elif ch in pairs and stack and stack[-1][0] == pairs[ch]:
            stack.pop()
        if ch == "\n":
            line, col = line + 1, 1
        else:
            col += 1
    return stack


# The header before a declaration's `{`: `mixer NAME` or `model NAME extends BASE`.
_DECL_HEADER = re.compile(r"\b(mixer|model)\s+([A-Za-z_][A-Za-z0-9_]*)(\s+extends\s+[A-Za-z_][A-Za-z0-9_]*)?\s*$")
# A top-level keyword just before the offending token, read by the parser as an assignment key.
_KEYWORD_BEFORE = re.compile(r"(?:^|\s)(mixer|model|import)\s*$")


def _unclosed(text: str, lines: _Lines, upto: int) -> tuple[Span, str, str, int] | None:
    """The innermost bracket still open at offset `upto`: (its span, what it opens in words,
    its closer, its offset); None when every bracket is closed there."""
    stack = _open_brackets(text[:upto])
    if not stack:
        return None
    ch, offset, line, col = stack[-1]
    closer = {"{": "}", "(": ")", "[": "]"}[ch]
    header = _DECL_HEADER.search(text[:offset]) if ch == "{" and len(stack) == 1 else None
    what = f"{header.group(1)} `{header.group(2)}`" if header else f"this `{ch}`"
    return lines.span(line, col, line, col + 1), what, closer, offset


def _block_never_closed(token: Token, expected: set[str], text: str, lines: _Lines) -> SeqSyntaxError | None:
    """A missing `}` shows up only at the next declaration, whose keyword the parser reads as
    an assignment key (`model` in `model m {`) and then stops at its name, "expected `=`". Say
    which block is unclosed and point at the `{` that opened it.

    Only when that `{` is still open at the end of the file: `model m { mixer a }` is a missing
    `=` (the block is closed), not a missing brace."""
    if expected != {"EQUAL"} or token.start_pos is None:
        return None
    keyword = _KEYWORD_BEFORE.search(text[:token.start_pos])
    if keyword is None:
        return None
    open_ = _unclosed(text, lines, keyword.start(1))
    if open_ is None or open_[1].startswith("this"):
        return None
    span, what, closer, offset = open_
    if offset not in {o for _, o, _, _ in _open_brackets(text)}:
        return None
    kw_line = text.count("\n", 0, keyword.start(1)) + 1
    starts = "an import" if keyword.group(1) == "import" else "a new declaration"
    return SeqSyntaxError(
        f"{what} is never closed: this `{{` has no matching `{closer}`", span,
        f"add `{closer}` before line {kw_line}, where `{keyword.group(1)}` starts {starts}: blocks do not nest")


def _explain(err: lark.exceptions.UnexpectedInput, text: str, lines: _Lines) -> SeqSyntaxError:
    line = getattr(err, "line", None) or 1
    column = getattr(err, "column", None) or 1
    if line < 1:  # lark reports -1 for errors at end of input
        line = lines.last
        column = len(lines.lines[line - 1]) + 1
    span = lines.span(line, column, line, column + 1)

    if isinstance(err, lark.exceptions.UnexpectedCharacters):
        ch = text[err.pos_in_stream] if err.pos_in_stream < len(text) else "?"
        hint = None
        if ch == "'":
            hint = 'strings use double quotes: "..."'
        elif ch == '"':
            hint = 'this string is never closed: end it with `"` on the same line'
        elif ch in "/*+-":
            hint = "the language has no arithmetic: write the resulting number"
        elif not ch.isascii():
            hint = "names use ASCII letters, digits and `_`"
        # Control and other unprintable characters are shown by code point, not raw.
        shown = f"`{ch}`" if ch.isprintable() and not ch.isspace() else f"U+{ord(ch):04X}"
        return SeqSyntaxError(f"unexpected character {shown}", span, hint)

    token = getattr(err, "token", None)
    expected = set(getattr(err, "expected", None) or getattr(err, "allowed", None) or ())
    words = _expected_words(expected)
    at_end = token is None or token.type == "$END"
    if at_end:
        opened = _unclosed(text, lines, len(text))
        if opened:
            open_span, what, closer, _ = opened
            return SeqSyntaxError(f"unexpected end of file: {what} is never closed", open_span,
                                  f"add `{closer}` to close it")
        return SeqSyntaxError(f"unexpected end of file; expected {', '.join(words)}", span)

    got = str(token)
    tspan = lines.of_token(token)
    if token.type == "NAME" and expected <= {"MIXER", "MODEL", "IMPORT", "$END"} and expected:
        hint = did_you_mean(got, _TOP_KEYWORDS) or "a file holds `import`, `mixer` and `model` declarations"
        return SeqSyntaxError(f"expected a declaration, got `{got}`", tspan, hint)
    unclosed = _block_never_closed(token, expected, text, lines)
    if unclosed is not None:
        return unclosed
    if expected == {"EQUAL"}:
        return SeqSyntaxError(f"expected `=` before `{got}`", tspan,
                              "assignments are written `key = value`")
    if "LBRACE" in expected and "RBRACE" not in expected:
        return SeqSyntaxError(f"expected `{{` to open the block, got `{got}`", tspan,
                              "a declaration is `mixer NAME { key = value ... }`")
    if "RPAR" in expected and token.type in {"NAME", "RBRACE", "EQUAL"} and "COMMA" in expected:
        return SeqSyntaxError(f"expected `,` or `)` in the argument list, got `{got}`", tspan,
                              "close the call with `)` or separate arguments with `,`")
    if token.type in {"RBRACE", "RPAR", "RSQB", "COMMA", "SEMICOLON"} and "NUMBER" in expected:
        return SeqSyntaxError(f"expected a value, got `{got}`", tspan,
                              "write a value: a name, a number, `true`/`false` or a call like `window(256)`")
    if token.type == "EQUAL":
        return SeqSyntaxError("unexpected `=`: the key before it is missing or the value is incomplete",
                              tspan, "assignments are written `key = value`")
    return SeqSyntaxError(f"unexpected `{got}`; expected {', '.join(words)}", tspan)
