"""`seqdsl check` and `seqdsl explain` from the command line: exit codes, JSON shape,
--select/--ignore, unreadable inputs (reported, exit 2, never a traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seqdsl.check import RULES
from seqdsl.cli.main import main

SPECS = Path(__file__).resolve().parents[2] / "specs"
BAD = "mixer broken {\n    weights = sofmax\n}\n"


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def bad(tmp_path):
    path = tmp_path / "bad.seq"
    path.write_text(BAD)
    return path


def test_exit_0_when_everything_passes(capsys):
    code, out, err = run(["check", str(SPECS / "transformer.seq"), str(SPECS / "top1_element.seq")], capsys)
    assert code == 0 and err == ""
    assert "transformer.seq: pass" in out and "checked 2 specs: 2 pass" in out


def test_exit_0_with_infos_only(capsys):
    code, out, _ = run(["check", str(SPECS / "rwkv7_top1_chunk_exact.seq")], capsys)
    assert code == 0 and "M002 [M info] rwkv7-transplant" in out


def test_exit_1_on_findings_with_located_diagnostics(capsys):
    code, out, _ = run(["check", str(SPECS / "window_256.seq")], capsys)
    assert code == 1
    first = out.splitlines()[0]
    assert first.startswith(f"{SPECS / 'window_256.seq'}:8:25: V001 [V error] finite-window: ")
    assert "    visibility = window(256)" in out and "^^^" in out
    assert "\n  why: " in out and "\n  fix: " in out
    assert "mixer window_256: fail (V001)" in out


def test_exit_follows_the_verdict_not_speed_notes(capsys, tmp_path):
    """Issue 9.7: a passing spec whose head dim runs on the reference path (W003, a speed note)
    exits 0; it used to exit 1."""
    path = tmp_path / "slow.seq"
    path.write_text('mixer m { head_dim = 96  select = top(1, over=chunk(100)) }\n'
                    'model lm { preset = "110m" mixer = m }\n')
    code, out, _ = run(["check", str(path)], capsys)
    assert "W003 [W warning]" in out and "W002 [W warning]" in out
    assert "slow.seq: pass" in out and code == 0


def test_help_states_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "0 when every spec passes" in out and "1 when any spec is degraded or fails" in out
    assert "W002/W003" in out


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_a_spec_without_mixer_or_model_is_bad_input(capsys, tmp_path, text):
    """Issue 9.6: an empty file used to pass with exit 0; `seqdsl lower` refuses it with the
    same message."""
    path = tmp_path / "empty.seq"
    path.write_text(text)
    code, out, err = run(["check", str(path)], capsys)
    assert code == 2 and "1 unreadable" in out
    assert err.startswith(f"{path}: error: the spec declares no mixer and no model")
    code, _, lower_err = run(["lower", str(path), "--no-tree"], capsys)
    assert code == 2 and "the spec declares no mixer and no model" in lower_err


def test_a_spec_that_only_imports_is_judged_on_its_imports(capsys, tmp_path):
    path = tmp_path / "only_imports.seq"
    path.write_text(f'import "{SPECS / "window_256.seq"}"\n')
    code, out, _ = run(["check", str(path)], capsys)
    assert code == 1 and "only_imports.seq: fail" in out and "mixer window_256: fail" in out


def test_exit_1_on_a_degraded_spec(capsys):
    assert run(["check", str(SPECS / "temperature_2.seq")], capsys)[0] == 1


def test_directory_checks_every_spec(capsys):
    code, out, _ = run(["check", str(SPECS)], capsys)
    assert code == 1
    assert f"checked {len(list(SPECS.glob('*.seq')))} specs" in out


def test_json_is_one_document(capsys):
    code, out, _ = run(["check", "--format", "json", str(SPECS / "window_256.seq"),
                        str(SPECS / "transformer.seq")], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["version"] == 1
    assert [s["verdict"] for s in doc["specs"]] == ["fail", "pass"]
    spec = doc["specs"][0]
    assert spec["mixers"] == {"window_256": "fail"} and spec["models"] == {"window_256_110m": "fail"}
    (d,) = spec["diagnostics"]
    assert set(d) >= {"code", "name", "pillar", "severity", "line", "column", "end_line",
                      "end_column", "message", "why", "fix", "subject"}
    assert (d["code"], d["line"], d["column"], d["subject"]) == ("V001", 8, 25, "window_256")
    assert doc["summary"]["verdicts"] == {"pass": 1, "degraded": 0, "fail": 1, "error": 0}
    assert doc["summary"]["exit_code"] == 1


def test_json_reports_unreadable_specs(capsys, bad, tmp_path):
    code, out, _ = run(["check", "--format", "json", str(bad), str(tmp_path / "missing.seq"),
                        str(SPECS / "transformer.seq")], capsys)
    doc = json.loads(out)
    assert code == 2
    broken, missing, fine = doc["specs"]
    assert broken["verdict"] == "error" and broken["error"]["line"] == 2
    assert broken["error"]["column"] == 15 and "sofmax" in broken["error"]["message"]
    assert missing["verdict"] == "error" and "no such file" in missing["error"]["message"]
    assert fine["verdict"] == "pass"


def test_select_and_ignore(capsys):
    path = str(SPECS / "mamba2.seq")
    code, out, _ = run(["check", "--format", "json", "--select", "N", path], capsys)
    assert {d["code"] for d in json.loads(out)["specs"][0]["diagnostics"]} == {"N001"}
    code, out, _ = run(["check", "--format", "json", "--ignore", "V003,V004", "--ignore",
                        "linear-weights", path], capsys)
    spec = json.loads(out)["specs"][0]
    assert code == 0 and spec["diagnostics"] == [] and spec["verdict"] == "pass"


def test_unknown_selector_is_bad_input(capsys):
    code, out, err = run(["check", "--select", "V0001", str(SPECS / "transformer.seq")], capsys)
    assert code == 2 and "matches no rule" in err and out == ""


def test_context_override(capsys):
    code, out, _ = run(["check", "--context", "8192", str(SPECS / "window_2048.seq")], capsys)
    assert code == 1 and "25% of the 8192-token context (--context)" in out


def test_missing_file_is_one_readable_message(capsys, tmp_path):
    code, out, err = run(["check", str(tmp_path / "nope.seq")], capsys)
    assert code == 2
    assert err.strip() == f"error: no such file: {tmp_path / 'nope.seq'}"
    assert "unreadable" in out


def test_malformed_file_is_located(capsys, bad):
    code, out, err = run(["check", str(bad)], capsys)
    assert code == 2
    assert err.startswith(f"{bad}:2:15: error: unknown weights `sofmax`")
    assert "did you mean `softmax`?" in err and "Traceback" not in err


def test_one_bad_path_does_not_hide_the_others(capsys, bad):
    code, out, err = run(["check", str(bad), str(SPECS / "window_256.seq"),
                          str(SPECS / "transformer.seq")], capsys)
    assert code == 2
    assert "window_256.seq: fail" in out and "transformer.seq: pass" in out
    assert "checked 3 specs: 1 pass, 0 degraded, 1 fail, 1 unreadable" in out


def test_subprocess_never_shows_a_traceback(tmp_path, bad):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "seqdsl.cli.main", "check", str(bad), str(tmp_path / "gone.seq"),
         str(empty), str(SPECS / "transformer.seq")],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "holds no .seq files" in proc.stderr and "transformer.seq: pass" in proc.stdout


def test_explain_prints_the_docstring(capsys):
    code, out, _ = run(["explain", "V001"], capsys)
    assert code == 0
    assert out.startswith("V001 finite-window\npillar: V (full-sequence visibility)")
    assert RULES["V001"].doc in out
    assert run(["explain", "aggregate-selection"], capsys)[1].startswith("R003 aggregate-selection")


def test_explain_unknown_code_suggests(capsys):
    code, out, err = run(["explain", "V01"], capsys)
    assert code == 2 and "unknown rule `V01`" in err and "did you mean `V001`?" in err


def test_explain_list(capsys):
    code, out, _ = run(["explain", "--list"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == len(RULES) and lines[0].startswith("V001  finite-window")


def test_summary_format_is_one_line_per_spec(capsys, bad):
    """Issue 20.9: the README's set-up command, `check specs/`, printed 530 lines; `--format
    summary` prints a line per spec (verdict and the codes behind it) and the totals, with the
    same exit code as the full text. Unreadable specs keep their error on stderr."""
    specs = sorted(SPECS.glob("*.seq"))
    code, out, err = run(["check", "--format", "summary", str(SPECS)], capsys)
    full_code, full_out, _ = run(["check", str(SPECS)], capsys)
    lines = out.splitlines()
    assert code == full_code == 1 and err == ""
    assert len(lines) == len(specs) + 2 and lines[-2] == ""
    assert lines[-1] == full_out.splitlines()[-1]  # the same totals line
    assert [line.split(":")[0] for line in lines[:-2]] == [str(p) for p in specs]
    shown = dict(line.split(": ", 1) for line in lines[:-2])
    assert shown[str(SPECS / "window_256.seq")] == "fail (V001)"
    assert shown[str(SPECS / "transformer.seq")] == "pass"
    assert shown[str(SPECS / "temperature_2.seq")] == "degraded (N002)"
    # every verdict the full text gives, the summary gives
    for spec in specs:
        assert f"\n{spec}: {shown[str(spec)].split(' ')[0]}\n" in "\n" + full_out
    code, out, err = run(["check", "--format", "summary", str(bad), str(SPECS / "transformer.seq")], capsys)
    assert code == 2 and out.splitlines()[:2] == [f"{bad}: unreadable", f"{SPECS / 'transformer.seq'}: pass"]
    assert "sofmax" in err


def test_readme_setup_command_prints_the_summary():
    readme = (SPECS.parent / "README.md").read_text()
    assert "seqdsl check specs/ --format summary --exit-zero" in readme
