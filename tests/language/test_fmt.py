"""`seqdsl fmt` keeps the user's comments: canonical order and spacing, same meaning, every
comment still there, next to the item it was written beside."""

from __future__ import annotations

import contextlib
import io
import os
import stat
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqdsl.cli.main import main
from seqdsl.fmt import _comment_start, format_source
from seqdsl.passes.resolve import typed_module as canonical_module
from seqdsl.ir.printer import format_module
from tests.language.strategies import modules
from tests.spec_library import SPEC_FILES, SPEC_IDS


def _comments(text: str) -> Counter:
    return Counter(line[line.index("#"):].rstrip() for line in text.splitlines() if "#" in line)


@pytest.mark.parametrize("path", SPEC_FILES, ids=SPEC_IDS)
def test_spec_library_is_canonical_and_keeps_its_comments(path):
    text = path.read_text()
    assert format_source(text, str(path)) == text, "run `seqdsl fmt --write specs/`"


def test_comments_move_with_their_assignment_when_reordered():
    text = (
        "# file header\n\n"
        "mixer x {  # opening\n"
        "  # why linear\n"
        "  weights = linear   # trailing\n"
        "  heads = 4\n"
        "  # before the brace\n"
        "}\n"
        "# end of file\n"
    )
    assert format_source(text) == (
        "# file header\n\n"
        "mixer x {  # opening\n"
        "    heads = 4\n"
        "    # why linear\n"
        "    weights = linear  # trailing\n"
        "    # before the brace\n"
        "}\n\n"
        "# end of file\n"
    )


_comment_text = st.from_regex(r"# [a-z ]{0,12}", fullmatch=True)


@settings(deadline=None)  # examples: the hypothesis profile's (tests/conftest.py)
@given(module=modules, data=st.data())
def test_random_comments_survive_formatting(module, data):
    lines = format_module(module).splitlines()
    out = []
    for line in lines:
        if data.draw(st.booleans()):
            out.append(data.draw(_comment_text))
        if line.strip() and data.draw(st.booleans()):
            line = f"{line}  {data.draw(_comment_text)}"
        out.append(line)
    text = "\n".join(out) + "\n"
    formatted = format_source(text)
    assert canonical_module(formatted) == module
    assert _comments(formatted) == _comments(text)
    assert format_source(formatted) == formatted


# --- regressions found in review -------------------------------------------------------------------


@pytest.mark.parametrize("line,col", [
    ('import "x\\"#y.seq"', None),             # an escaped quote does not end the string
    ('import "x\\"#y.seq"  # c', 20),
    ('import "x\\\\" # c', 13),                 # an escaped backslash does not escape the quote
    ('import "x\\\\\\"#" # c', 16),
    ("heads = 4  # c", 11),
    ('preset = "#"', None),
])
def test_comment_start_skips_strings_with_escapes(line, col):
    assert _comment_start(line) == col


def test_import_with_an_escaped_quote_and_a_hash_is_kept():
    text = 'import "x\\"#y.seq"  # why\nimport "a\\\\"  # c\n\nmixer a {}\n'
    assert format_source(text) == text
    assert canonical_module(text).imports == ('x"#y.seq', "a\\")


def test_trailing_comment_on_a_one_line_block_is_printed_once():
    text = "# above\nmixer a { heads = 4 }  # note\n"
    assert format_source(text) == "# above\nmixer a {  # note\n    heads = 4\n}\n"


def test_comments_of_a_shared_line_go_to_its_first_item():
    text = (
        "mixer a {\n"
        "    # above\n"
        "    weights = linear  heads = 4  # note\n"
        "    # before the brace\n"
        "    expand = 2 }  # end\n"
        'import "a.seq"  import "b.seq"  # two imports\n'
    )
    formatted = format_source(text)
    assert formatted == (
        'import "a.seq"  # two imports\n'
        'import "b.seq"\n\n'
        "mixer a {\n"
        "    heads = 4\n"
        "    # before the brace\n"
        "    expand = 2  # end\n"
        "    # above\n"
        "    weights = linear  # note\n"
        "}\n"
    )
    assert _comments(formatted) == _comments(text)
    assert format_source(formatted) == formatted


def test_form_feed_does_not_shift_comments():
    """fmt counted lines with splitlines(), which breaks at \\f: comments moved to other items."""
    text = "# a\fb\nmixer a {\n    heads = 4  # four\n}\n"
    assert format_source(text) == text


# --- `seqdsl fmt --write` ----------------------------------------------------------------------------

UNFORMATTED = "mixer a {   heads = 4   }  # note\n"
FORMATTED = "mixer a {  # note\n    heads = 4\n}\n"


def _fmt_write(*paths) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["fmt", "--write", *map(str, paths)])


def test_write_keeps_the_file_mode(tmp_path):
    path = tmp_path / "a.seq"
    path.write_text(UNFORMATTED)
    path.chmod(0o640)
    assert _fmt_write(path) == 0
    assert path.read_text() == FORMATTED
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["a.seq"], "no temporary file left behind"


def test_write_goes_through_a_symlink(tmp_path):
    target = tmp_path / "real" / "a.seq"
    target.parent.mkdir()
    target.write_text(UNFORMATTED)
    target.chmod(0o644)
    link = tmp_path / "link.seq"
    link.symlink_to(os.path.relpath(target, tmp_path))
    assert _fmt_write(link) == 0
    assert link.is_symlink(), "the link is still a link"
    assert target.read_text() == FORMATTED
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.seq", "real"]


def test_comments_inside_a_multi_line_value_move_above_the_next_item():
    text = ("model m {\n  preset = \"tiny\"\n  mixer = [\n    a,  # first\n    a  # second\n  ]  # end\n}\n"
            "mixer a {}\n")
    formatted = format_source(text)
    assert _comments(formatted) == _comments(text)
    assert "    # first\n    # second\n    # end\n}" in formatted


# --- several files and directories: every file reported, the worst exit code ------------------------


def _fmt(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["fmt", *map(str, argv)])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def mixed(tmp_path):
    """A directory with a canonical, an unformatted and an unreadable file, in that order."""
    d = tmp_path / "specs"
    d.mkdir()
    (d / "a_canonical.seq").write_text(FORMATTED)
    (d / "b_broken.seq").write_text("mixer b {\n    heads 4\n}\n")
    (d / "c_ugly.seq").write_text(UNFORMATTED)
    return d


def test_check_reports_every_file_after_an_unreadable_one(mixed, tmp_path):
    """`fmt --check` stopped at the first unreadable file; later files were never reported."""
    missing = tmp_path / "missing.seq"
    code, out, err = _fmt("--check", missing, mixed)
    assert code == 2, "unreadable beats not canonical"
    assert out == ""
    assert f"no such file: {missing}" in err
    assert "b_broken.seq:2:11: syntax error: expected `=` before `4`" in err
    assert f"would reformat {mixed / 'c_ugly.seq'}" in err
    assert "a_canonical" not in err.replace("1 already canonical", "")
    assert err.rstrip().endswith("4 files: 1 would be reformatted, 1 already canonical, 2 unreadable")
    assert (mixed / "c_ugly.seq").read_text() == UNFORMATTED, "--check writes nothing"


def test_check_on_a_directory_exits_1_when_only_formatting_differs(mixed):
    (mixed / "b_broken.seq").unlink()
    assert _fmt("--check", mixed)[0] == 1
    (mixed / "c_ugly.seq").write_text(FORMATTED)
    assert _fmt("--check", mixed)[0] == 0


def test_write_goes_on_past_an_unreadable_file(mixed):
    code, _, err = _fmt("--write", mixed)
    assert code == 2
    assert (mixed / "c_ugly.seq").read_text() == FORMATTED
    assert (mixed / "b_broken.seq").read_text() == "mixer b {\n    heads 4\n}\n", "left as it was"
    assert "3 files: 1 reformatted, 1 already canonical, 1 unreadable" in err


def test_printing_several_files_names_each(mixed):
    (mixed / "b_broken.seq").unlink()
    code, out, _ = _fmt(mixed)
    assert code == 0
    assert out == (f"# ==> {mixed / 'a_canonical.seq'} <==\n{FORMATTED}\n"
                   f"# ==> {mixed / 'c_ugly.seq'} <==\n{FORMATTED}")


def test_printing_one_file_prints_it_alone(mixed):
    assert _fmt(mixed / "c_ugly.seq")[1] == FORMATTED


def test_an_empty_directory_is_reported(tmp_path):
    code, _, err = _fmt("--check", tmp_path)
    assert code == 2
    assert f"{tmp_path} holds no .seq files" in err


def test_resolved_goes_on_past_an_unreadable_file(mixed):
    code, out, err = _fmt("--resolved", mixed)
    assert code == 2
    assert out.count("mixer a {") == 2 and "b_broken.seq:2:11" in err


def test_a_comment_on_the_byte_order_mark_line_is_kept_in_place():
    text = "# header\nmixer a {}  # why\n"
    assert format_source("\ufeff" + text) == text


def test_write_removes_a_byte_order_mark(tmp_path):
    path = tmp_path / "bom.seq"
    path.write_bytes(b"\xef\xbb\xbf" + FORMATTED.encode())
    assert _fmt("--check", path)[0] == 1, "the canonical form has no BOM"
    assert _fmt("--write", path)[0] == 0
    assert path.read_bytes() == FORMATTED.encode()


def test_a_file_that_cannot_be_written_is_one_message(tmp_path, monkeypatch):
    """A failed write (read-only directory, full disk) was an OSError traceback."""
    path = tmp_path / "a.seq"
    path.write_text(UNFORMATTED)

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    code, _, err = _fmt("--write", path)
    assert code == 2
    assert f"cannot write {path}: Permission denied" in err and "Traceback" not in err
    assert path.read_text() == UNFORMATTED
    assert [p.name for p in tmp_path.iterdir()] == ["a.seq"], "no temporary file left behind"
