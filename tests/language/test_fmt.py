"""`seqdsl fmt` keeps the user's comments: canonical order and spacing, same meaning, every
comment still there, next to the item it was written beside."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqdsl.fmt import canonical_module, format_source
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


@settings(max_examples=60, deadline=None)
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
