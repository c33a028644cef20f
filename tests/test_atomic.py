"""seqdsl/atomic.py: a rewrite replaces the whole file or nothing, keeps a file's permission
bits, writes through a symlink, and leaves no temporary file behind when it fails."""

from __future__ import annotations

import os
import stat

import pytest

from seqdsl import atomic
from seqdsl.atomic import write_atomic


def test_a_rewrite_replaces_the_contents_and_keeps_the_mode(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("old\n")
    os.chmod(path, 0o640)
    write_atomic(path, "new\n")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["records.jsonl"]


def test_a_new_file_gets_the_umasks_mode_not_mkstemps_0600(tmp_path):
    write_atomic(tmp_path / "new.json", b"{}", durable=True)
    assert (tmp_path / "new.json").read_bytes() == b"{}"
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == atomic._NEW_FILE_MODE != 0o600


def test_a_symlink_is_written_through(tmp_path):
    target = tmp_path / "spec.seq"
    target.write_text("old")
    link = tmp_path / "link.seq"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "latest"
    path.write_text("step_000010")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, "step_000020")
    assert path.read_text() == "step_000010"
    assert [p.name for p in tmp_path.iterdir()] == ["latest"]
