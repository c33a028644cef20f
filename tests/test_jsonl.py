"""seqdsl/jsonl.py: a record file that a killed writer left with half a line reads, and takes
appends, as if the half line had never been written; a broken line elsewhere is an error."""

from __future__ import annotations

import json

import pytest

from seqdsl import jsonl
from seqdsl.errors import SeqFileError

WHOLE = "".join(json.dumps({"kind": "train", "step": i}) + "\n" for i in range(3))


@pytest.mark.parametrize("cut", [b'{"kind": "tra', b'{"kind": "train", "note": "' + b"x" * 10_000, b'{"t": "\xc3',
                                 b"[1, 2]"])
def test_a_cut_last_line_is_skipped_on_read_and_dropped_before_an_append(tmp_path, cut):
    """Cut lines short and longer than the 4 KiB tail block, one cut inside a character's UTF-8
    bytes, a JSON value that is not a record."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(WHOLE.encode() + cut)
    records, note = jsonl.read(path)
    assert [r["step"] for _, r in records] == [0, 1, 2] and "m.jsonl:4" in note
    assert jsonl.append(path, [{"kind": "eval"}]) is True
    assert path.read_text() == WHOLE + json.dumps({"kind": "eval"}) + "\n"
    assert jsonl.read(path)[1] is None


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(WHOLE.rstrip("\n"))
    assert jsonl.drop_cut_line(path) is False and path.read_text() == WHOLE


@pytest.mark.parametrize("text", ["", '{"kind": "tr'])
def test_an_empty_file_or_one_cut_line_leaves_an_empty_file(tmp_path, text):
    path = tmp_path / "m.jsonl"
    path.write_text(text)
    assert jsonl.drop_cut_line(path) is bool(text) and path.read_text() == ""
    assert jsonl.drop_cut_line(tmp_path / "missing.jsonl") is False


def test_a_broken_line_before_the_last_is_an_error_naming_it(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(WHOLE + "{oops\n" + WHOLE)
    with pytest.raises(SeqFileError, match=r"m.jsonl:4: not a JSON record"):
        jsonl.read(path)


def test_keep_only_rewrites_the_kept_records_and_drops_a_cut_last_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "loss": 0.5}\n{"step": 3}\n{"step": 4, "lo')
    assert jsonl.keep_only(path, lambda r: r["step"] <= 2) == 1  # step 3; the cut line was never a record
    assert path.read_text() == '{"step": 1}\n{"step": 2, "loss": 0.5}\n'
    assert not (tmp_path / "m.jsonl.tmp").exists()
    assert jsonl.keep_only(tmp_path / "missing.jsonl", lambda r: True) == 0
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(SeqFileError, match="m.jsonl:2"):
        jsonl.keep_only(path, lambda r: True)
    assert path.read_text() == '{"step": 1}\nnot json\n{"step": 2}\n'  # refused: left as it was
