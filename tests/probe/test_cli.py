"""`seqdsl probe`: records, table, resume and plot on a run of a few steps; one-line errors for
bad input (exit 2, no traceback)."""

from __future__ import annotations

import json

import pytest

from seqdsl.cli.main import main
from seqdsl.probe.records import read_records

QUICK = ["--seq-len", "8", "--steps", "3", "--batch", "4", "--eval-examples", "4", "--threads", "1"]


def test_probe_writes_a_record_per_difficulty_and_resume_skips_them(tmp_path, capsys):
    out = tmp_path / "probe"
    argv = ["probe", "specs/transformer.seq", "--tasks", "copy,mqar", "--out", str(out), *QUICK]
    assert main(argv) == 0
    records = read_records(out / "probe.jsonl")
    # copy: string lengths 1, 2, 4 around seq_len 8; mqar: 1 and 2 pairs at 8 tokens
    assert [(r["task"], r["level"]) for r in records] == [
        ("copy", {"seq_len": 2, "length": 1}), ("copy", {"seq_len": 4, "length": 2}),
        ("copy", {"seq_len": 8, "length": 4}),
        ("mqar", {"seq_len": 8, "pairs": 1, "queries": 1}), ("mqar", {"seq_len": 8, "pairs": 2, "queries": 2})]
    for r in records:
        assert 0.0 <= r["accuracy"] <= 1.0 and r["examples"] == 4 and r["label"] == "transformer"
        assert r["verdict"] == "pass" and r["settings"]["steps"] == 3
    printed = capsys.readouterr().out
    assert "| transformer | copy" in printed and "records:" in printed
    assert (out / "probe.png").is_file()

    # again without --resume: refused, nothing appended
    assert main(argv) == 2
    assert "already holds probe results" in capsys.readouterr().err
    assert len(read_records(out / "probe.jsonl")) == 5

    # with --resume: nothing trained again, the table is the stored results
    assert main([*argv, "--resume"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("done already") == 2
    assert len(read_records(out / "probe.jsonl")) == 5

    # another setting is another result: trained and appended
    assert main(["probe", "specs/transformer.seq", "--tasks", "copy", "--out", str(out), *QUICK,
                 "--seed", "1", "--resume", "--quiet", "--no-plot"]) == 0
    assert len(read_records(out / "probe.jsonl")) == 8


def test_resume_ignores_a_last_line_cut_short(tmp_path):
    out = tmp_path / "probe"
    argv = ["probe", "specs/transformer.seq", "--tasks", "induction", "--out", str(out), *QUICK,
            "--quiet", "--no-plot"]
    assert main(argv) == 0
    path = out / "probe.jsonl"
    whole = path.read_text()
    path.write_text(whole + whole.splitlines()[0][:30])  # a record cut mid-write
    assert main([*argv, "--resume"]) == 0
    assert path.read_text() == whole, "the cut line is dropped, the whole records kept"
    path.write_text(whole + whole.splitlines()[0][:30])
    assert main([*argv, "--resume", "--seed", "1"]) == 0  # new results appended after the cut
    assert len(read_records(path)) == 6
    assert all(json.loads(line) for line in path.read_text().splitlines())


@pytest.mark.parametrize("argv, message", [
    (["specs/transformer.seq", "--tasks", "mqra"], "error: unknown task `mqra`"),
    (["specs/transformer.seq", "--tasks", ","], "--tasks names no task"),
    (["specs/nonexistent.seq", "--tasks", "mqar"], "nonexistent.seq"),
    (["specs/transformer.seq", "--steps", "0"], "--steps must be positive"),
    (["specs/transformer.seq", "--tasks", "copy", "--preset", "huge"], "unknown preset"),
    (["specs/transformer.seq", "--tasks", "needle", "--needle-text", "builtin:poetry"],
     "unknown builtin domain `poetry`"),
])
def test_user_errors_are_one_message(argv, message, tmp_path, capsys):
    assert main(["probe", *argv, "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "p").exists(), "nothing is written before the input is checked"


def test_a_bad_spec_is_a_located_error(tmp_path, capsys):
    bad = tmp_path / "bad.seq"
    bad.write_text("mixer m { visibility = windw(8) }\n")
    assert main(["probe", str(bad), "--tasks", "mqar", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1:" in err and "Traceback" not in err


def test_the_needle_text_is_a_record_of_the_needle_only_and_resume_finds_the_others(tmp_path):
    """`--needle-text` names the needle's filler in the needle's records; another task's records
    do not carry it, so a resume with or without it finds that task's results."""
    out = tmp_path / "probe"
    base = ["probe", "specs/transformer.seq", "--out", str(out), *QUICK, "--seq-len", "32", "--quiet", "--no-plot"]
    assert main([*base, "--tasks", "copy"]) == 0
    copies = len(read_records(out / "probe.jsonl"))
    assert main([*base, "--tasks", "copy,needle", "--needle-text", "builtin", "--resume"]) == 0
    records = read_records(out / "probe.jsonl")
    assert sum(r["task"] == "copy" for r in records) == copies  # found, not trained again
    assert {r["text"] for r in records if r["task"] == "copy"} == {None}
    assert {r["text"] for r in records if r["task"] == "needle"} == {"builtin"}
