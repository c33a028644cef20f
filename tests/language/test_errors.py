"""Errors in a spec point at the user's text: the common mistakes each get their own message,
line, column, caret and hint; and no input, however mangled, gets anything but a `SeqError`
(from the library) or exit code 2 with a readable message (from the CLI)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seqdsl
from seqdsl import SeqError, SeqSyntaxError, loads, typed_module
from seqdsl.cli.main import main

SPECS = Path(__file__).resolve().parents[2] / "specs"
SPEC_TEXTS = [p.read_text() for p in sorted(SPECS.glob("*.seq"))]

# (name, text, message fragment, line, column, caret width, hint fragment or None)
MISTAKES = [
    ("missing closing brace", "mixer a {\n    heads = 12\n",
     "unexpected end of file: mixer `a` is never closed", 1, 9, 1, "add `}`"),
    ("missing closing brace before the next declaration",
     'mixer a {\n    heads = 12\n\nmodel m {\n    preset = "tiny"\n    mixer = a\n}\n',
     "mixer `a` is never closed: this `{` has no matching `}`", 1, 9, 1, "add `}` before line 4"),
    ("missing =", "mixer a {\n    heads 12\n}\n",
     "expected `=` before `12`", 2, 11, 2, "key = value"),
    ("unknown primitive", "mixer a {\n    weights = sofmax\n}\n",
     "unknown weights `sofmax`", 2, 15, 6, "did you mean `softmax`?"),
    ("unknown primitive call", "mixer a {\n    visibility = windw(256)\n}\n",
     "unknown visibility `windw`", 2, 18, 5, "did you mean `window`?"),
    ("too many arguments", "mixer a {\n    visibility = window(256, 4, 3)\n}\n",
     "`window` takes 2 arguments (size, sink), got 3", 2, 33, 1, "signature: window(size, sink=0)"),
    ("missing argument", "mixer a {\n    visibility = window()\n}\n",
     "`window` needs `size`", 2, 18, 8, "signature: window(size, sink=0)"),
    ("unknown keyword argument", "mixer a {\n    weights = softmax(temp=2)\n}\n",
     "`softmax` has no parameter `temp`", 2, 23, 4, "signature: softmax(temperature=1.0)"),
    ("typo in field name", "mixer a {\n    head_dmi = 64\n}\n",
     "unknown mixer field `head_dmi`", 2, 5, 8, "did you mean `head_dim`?"),
    ("misspelt mixer keyword", "mixr a {\n    heads = 1\n}\n",
     "expected a declaration, got `mixr`", 1, 1, 4, "did you mean `mixer`?"),
    ("unclosed paren", "mixer a {\n    visibility = window(256\n}\n",
     "expected `,` or `)` in the argument list, got `}`", 3, 1, 1, "close the call"),
    ("unclosed paren at end", "mixer a {\n    visibility = window(256",
     "this `(` is never closed", 2, 24, 1, "add `)`"),
    ("single quotes", "model m {\n    preset = '110m'\n}\n",
     "unexpected character `'`", 2, 14, 1, "double quotes"),
    ("unclosed string", 'model m {\n    preset = "110m\n}\n',
     'unexpected character `"`', 2, 14, 1, "never closed"),
    ("arithmetic", "mixer a {\n    head_dim = 32 * 2\n}\n",
     "unexpected character `*`", 2, 19, 1, "no arithmetic"),
    ("float for an integer", "mixer a {\n    head_dim = 64.0\n}\n",
     "`head_dim` takes a whole number, got `64.0`", 2, 16, 4, "whole number"),
    ("out of range", "mixer a {\n    visibility = window(-3)\n}\n",
     "`window` size: must be greater than 0", 2, 25, 2, "signature"),
    ("decay out of range", "mixer a {\n    decay = constant(gamma=1.5)\n}\n",
     "`constant` gamma: must be less than 1", 2, 28, 3, "signature"),
    ("zero heads", "mixer a {\n    heads = 0\n}\n",
     "`heads` must be greater than 0", 2, 5, 9, None),
    ("unknown base in extends", "mixer attn {}\nmixer b extends atn {}\n",
     "mixer `b` extends unknown mixer `atn`", 2, 17, 3, "did you mean `attn`?"),
    ("extends cycle", "mixer a extends b {}\nmixer b extends a {}\n",
     "mixer `a` extends itself (via a -> b -> a)", 1, 17, 1, None),
    ("duplicate field", "mixer a {\n    heads = 1\n    heads = 2\n}\n",
     "`heads` is assigned twice in mixer `a`", 3, 5, 5, "first assignment is at line 2"),
    ("duplicate declaration", "mixer a {}\nmixer a {}\n",
     "mixer `a` is declared twice", 2, 7, 1, "rename"),
    ("unknown mixer in model", 'mixer attn {}\nmodel m {\n    preset = "110m"\n    mixer = atn\n}\n',
     "model `m` uses unknown mixer `atn`", 4, 5, 11, "did you mean `attn`?"),
    ("model without mixer", 'model m {\n    preset = "110m"\n}\n',
     "model `m` needs `mixer`", 1, 7, 1, "set `mixer = ...`"),
    ("unknown preset", 'mixer a {}\nmodel m {\n    preset = "110M"\n    mixer = a\n}\n',
     'unknown preset "110M"', 3, 14, 6, 'did you mean `110m`?'),
    ("reserved name", "mixer true {}\n", "`true` is a reserved word", 1, 7, 4, None),
    ("deep nesting", "mixer a {\n    heads = " + "[" * 40 + "\n}\n",
     "nested more than 32 deep", 2, 44, 1, None),
]


@pytest.mark.parametrize("name,text,message,line,column,width,hint", MISTAKES,
                         ids=[m[0] for m in MISTAKES])
def test_common_mistake(name, text, message, line, column, width, hint):
    with pytest.raises(SeqError) as info:
        loads(text, "spec.seq")
    err = info.value
    assert message in err.message
    assert (err.span.line, err.span.column) == (line, column)
    rendered = err.render()
    assert rendered.startswith(f"spec.seq:{line}:{column}: ")
    caret_line = rendered.splitlines()[2]
    assert caret_line.strip() == "^" * width
    # The caret sits under the column: gutter "NNNN | " is 7 characters wide.
    assert caret_line.index("^") == 7 + column - 1
    if hint:
        assert hint in (err.hint or "")


def test_import_of_a_missing_file(tmp_path):
    with pytest.raises(SeqError) as info:
        loads('import "nope.seq"\nmixer a {}\n', "spec.seq", base_dir=tmp_path)
    assert info.value.message == f"no such file: {tmp_path / 'nope.seq'}"
    assert (info.value.span.line, info.value.span.column) == (1, 8)


def test_import_cycle(tmp_path):
    (tmp_path / "a.seq").write_text('import "b.seq"\n')
    (tmp_path / "b.seq").write_text('import "a.seq"\n')
    with pytest.raises(SeqError, match="import cycle"):
        loads((tmp_path / "a.seq").read_text(), str(tmp_path / "a.seq"), base_dir=tmp_path)


def test_extends_an_imported_base_with_a_typo(tmp_path):
    (tmp_path / "base.seq").write_text("mixer transformer { position = rope }\n")
    with pytest.raises(SeqError) as info:
        loads('import "base.seq"\nmixer w extends transfomer {}\n', "w.seq", base_dir=tmp_path)
    assert info.value.hint == "did you mean `transformer`?"


def test_syntax_errors_are_syntax_errors():
    with pytest.raises(SeqSyntaxError):
        typed_module("mixer a {")


# --- fuzzing: nothing but SeqError, ever -----------------------------------------------------------

# \r, \f, \x0b, \x1c, \x85 and \u2028 end a line for str.splitlines() but not for the lexer.
ALPHABET = st.sampled_from(list('mixerodlxtnds{}()[]=,;#"\'.-+*/_ 0123456789\n\tabcwkvqé\x00'
                                '\r\f\x0b\x1c\x85\u2028'))


def _parse_only_seq_errors(text: str) -> None:
    for parse in (typed_module, loads):
        try:
            parse(text)
        except SeqError as err:
            assert err.render()  # renders without raising
        except RecursionError:  # pragma: no cover - reported as a failure below
            pytest.fail("RecursionError escaped")


@settings(max_examples=300, deadline=None)
@given(st.text(ALPHABET, max_size=80))
def test_random_text_raises_only_seq_errors(text):
    _parse_only_seq_errors(text)


@st.composite
def mutated_specs(draw):
    """A real spec with a few characters inserted, deleted or replaced."""
    text = draw(st.sampled_from(SPEC_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        ch = draw(ALPHABET)
        if op == "insert":
            text = text[:pos] + ch + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + 1:]
        else:
            text = text[:pos] + ch + text[pos + 1:]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_specs())
def test_mutated_specs_raise_only_seq_errors(text):
    try:
        typed_module(text)
    except SeqError as err:
        assert err.render()
    try:  # with imports resolved against the real library, inheritance and all
        loads(text, "mutated.seq", base_dir=SPECS)
    except SeqError as err:
        assert err.render()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated_specs(), min_size=1, max_size=3))
def test_check_cli_on_fuzzed_files(tmp_path_factory, texts):
    directory = tmp_path_factory.mktemp("fuzz")
    paths = []
    for i, text in enumerate(texts):
        path = directory / f"f{i}.seq"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    # Imports in the library point at siblings: give the fuzzed files the real ones to find.
    for spec in SPECS.glob("*.seq"):
        (directory / spec.name).write_text(spec.read_text())
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", *paths])
    assert code in (0, 1, 2)
    assert "Traceback" not in err.getvalue() + out.getvalue()
    if code == 2:
        assert err.getvalue().strip(), "an unreadable spec is reported on stderr"
    assert f"checked {len(paths)} spec" in out.getvalue()


def test_nul_byte_in_an_import_path():
    """Found by fuzzing: a NUL byte in an import path used to escape as ValueError."""
    with pytest.raises(SeqError, match="embedded null byte") as info:
        loads('import "a\x00b.seq"\n', "spec.seq")
    assert info.value.span.column == 8


# --- line breaks: only "\n" ends a line ------------------------------------------------------------

# Characters that str.splitlines() treats as line ends but the lexer does not.
NOT_NEWLINES = ["\r", "\f", "\x0b", "\x1c", "\x85", "\u2028"]


@pytest.mark.parametrize("ch", NOT_NEWLINES, ids=lambda c: f"U+{ord(c):04X}")
def test_span_line_text_after_a_splitlines_break_in_a_comment(ch):
    """Found in review: spans took their line's text from `splitlines()`, so after one of these
    characters every diagnostic showed the wrong line (and an unclosed brace raised IndexError)."""
    with pytest.raises(SeqError) as info:
        loads(f"# a{ch}b\nmixer a {{\n    heads = 0\n}}\n", "spec.seq")
    span = info.value.span
    assert (span.line, span.column) == (3, 5)
    assert span.line_text == "    heads = 0"
    assert info.value.render().splitlines()[1] == "   3 |     heads = 0"


@pytest.mark.parametrize("ch", NOT_NEWLINES, ids=lambda c: f"U+{ord(c):04X}")
def test_unclosed_brace_after_a_splitlines_break(ch):
    with pytest.raises(SeqSyntaxError) as info:
        typed_module(f"# a{ch}b\nmixer a {{", "spec.seq")
    err = info.value
    assert "mixer `a` is never closed" in err.message
    assert (err.span.line, err.span.column) == (2, 9)
    assert err.span.line_text == "mixer a {"


@pytest.mark.parametrize("ch", ["\f", "\r"], ids=lambda c: f"U+{ord(c):04X}")
def test_unclosed_brace_after_leading_whitespace_break(ch):
    """`printf '\\fmixer a {' > x.seq; seqdsl check x.seq` crashed with IndexError."""
    with pytest.raises(SeqSyntaxError) as info:
        typed_module(f"{ch}mixer a {{", "spec.seq")
    err = info.value
    assert "mixer `a` is never closed" in err.message
    assert (err.span.line, err.span.column) == (1, 10)
    assert err.render()


def test_check_cli_on_a_form_feed_file(tmp_path):
    path = tmp_path / "x.seq"
    path.write_bytes(b"\fmixer a {")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", str(path)])
    assert code == 2
    assert "never closed" in err.getvalue() and "Traceback" not in err.getvalue()


def test_crlf_line_text_has_no_carriage_return():
    with pytest.raises(SeqError) as info:
        loads("mixer a {\r\n    heads = 0\r\n}\r\n", "spec.seq")
    assert (info.value.span.line, info.value.span.line_text) == (2, "    heads = 0")


def test_end_of_file_error_points_at_the_last_line():
    """A file ending in "\n" has no line after it: the end-of-file error stays on the last one."""
    with pytest.raises(SeqSyntaxError) as info:
        typed_module("mixer a\n", "spec.seq")
    err = info.value
    assert (err.span.line, err.span.line_text) == (1, "mixer a")
    assert "unexpected end of file" in err.message


# --- what a new user hits (issue 9, item 9) --------------------------------------------------------


@pytest.mark.parametrize("following,line,col", [
    ('model m {\n    preset = "tiny"\n    mixer = a\n}\n', 4, 1),
    ("mixer b extends a {\n    heads = 2\n}\n", 4, 1),
    ('import "other.seq"\n', 4, 1),
    ("    mixer b {}\n", 4, 5),
])
def test_missing_brace_is_reported_at_the_block_it_leaves_open(following, line, col):
    """It was "expected `=` before `m`" at the next declaration: the keyword was read as a key."""
    text = "mixer a extends b {\n    heads = 12\n\n" + following
    with pytest.raises(SeqSyntaxError) as info:
        typed_module(text, "spec.seq")
    err = info.value
    assert err.message == "mixer `a` is never closed: this `{` has no matching `}`"
    assert (err.span.line, err.span.column, err.span.end_column) == (1, 19, 20)
    keyword = following.split()[0]
    assert err.hint.startswith(f"add `}}` before line {line}, where `{keyword}` starts")
    assert err.render().splitlines()[:3] == [
        "spec.seq:1:19: syntax error: " + err.message,
        "   1 | mixer a extends b {",
        "                         ^",
    ]


def test_missing_brace_of_a_model_before_a_mixer():
    """In a model block `mixer` is also a key (`mixer = a`): still a missing brace when the `{`
    stays open to the end of the file."""
    text = 'model m {\n    preset = "tiny"\n    mixer = a\n\nmixer a {\n}\n'
    with pytest.raises(SeqSyntaxError) as info:
        typed_module(text, "spec.seq")
    assert info.value.message.startswith("model `m` is never closed")
    assert (info.value.span.line, info.value.span.column) == (1, 9)


def test_missing_equals_in_a_closed_block_is_not_a_missing_brace():
    text = 'model m {\n    preset = "tiny"\n    mixer a\n}\nmixer a {}\n'
    with pytest.raises(SeqSyntaxError) as info:
        typed_module(text, "spec.seq")
    assert info.value.message == "expected `=` before `a`"
    assert (info.value.span.line, info.value.span.column) == (3, 11)


BOM = "\ufeff"


def test_leading_byte_order_mark_is_accepted(tmp_path):
    """Some editors start UTF-8 files with a BOM; it was "unexpected character U+FEFF"."""
    text = "mixer a {\n    heads = 4\n}\n"
    path = tmp_path / "bom.seq"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert seqdsl.load(path).program == loads(text).program
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["check", str(path)]) == 0, err.getvalue()


def test_columns_on_the_first_line_of_a_bom_file_count_from_the_text():
    with pytest.raises(SeqError) as info:
        loads(BOM + "mixer a { heads = 0 }\n", "spec.seq")
    span = info.value.span
    assert (span.line, span.column, span.line_text) == (1, 11, "mixer a { heads = 0 }")


def test_byte_order_mark_inside_the_text_is_still_an_error():
    with pytest.raises(SeqSyntaxError, match="U\\+FEFF"):
        typed_module("mixer a {}\n" + BOM + "mixer b {}\n")


def _clash(tmp_path, files: dict[str, str], top: str) -> SeqError:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(SeqError) as info:
        seqdsl.load(tmp_path / top)
    return info.value


def test_clash_with_an_import_is_reported_at_the_importing_declaration(tmp_path):
    """It was reported inside the imported file, which is not wrong on its own."""
    err = _clash(tmp_path, {"lib.seq": "mixer a {\n    heads = 4\n}\n",
                            "top.seq": 'import "lib.seq"\n\nmixer a {\n    heads = 2\n}\n'}, "top.seq")
    assert err.message == "mixer `a` is declared twice (an imported file declares it too)"
    assert (Path(err.span.file).name, err.span.line, err.span.column) == ("top.seq", 3, 7)
    (note,) = err.notes
    assert (Path(note.span.file).name, note.span.line, note.span.column) == ("lib.seq", 1, 7)
    lines = err.render().splitlines()
    assert lines[0].endswith("top.seq:3:7: error: " + err.message)
    assert lines[3].endswith("lib.seq:1:7: note: the other `a` is declared here, in an imported file")


def test_clash_between_two_imports_is_reported_at_the_second_import_line(tmp_path):
    err = _clash(tmp_path, {"one.seq": "mixer a {}\n", "two.seq": "mixer a {\n    heads = 2\n}\n",
                            "top.seq": 'import "one.seq"\nimport "two.seq"\nmixer b {}\n'}, "top.seq")
    assert (Path(err.span.file).name, err.span.line, err.span.column) == ("top.seq", 2, 1)
    assert [(Path(n.span.file).name, n.span.line) for n in err.notes] == [("one.seq", 1), ("two.seq", 1)]


def test_clash_through_a_chain_of_imports_is_reported_in_the_top_file(tmp_path):
    err = _clash(tmp_path, {"lib.seq": "mixer a {}\n", "mid.seq": 'import "lib.seq"\nmixer b {}\n',
                            "top.seq": 'import "mid.seq"\nmixer a {}\n'}, "top.seq")
    assert (Path(err.span.file).name, err.span.line) == ("top.seq", 2)
    assert [Path(n.span.file).name for n in err.notes] == ["lib.seq"]


def test_clash_inside_an_imported_file_stays_there(tmp_path):
    """The importing file did nothing wrong: the clash is the imported file's own."""
    err = _clash(tmp_path, {"lib.seq": "mixer a {}\nmixer a {}\n", "top.seq": 'import "lib.seq"\n'}, "top.seq")
    assert (Path(err.span.file).name, err.span.line) == ("lib.seq", 2)
    assert [(Path(n.span.file).name, n.span.line) for n in err.notes] == [("lib.seq", 1)]
