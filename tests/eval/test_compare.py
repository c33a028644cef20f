"""`seqdsl compare` on synthetic metrics.jsonl files whose interpolated values are computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqdsl.cli.main import main
from seqdsl.errors import SeqError, SeqFileError
from seqdsl.eval.compare import (
    BELOW_AT_FIRST, NOT_REACHED, compare, markdown, to_json, train_loss_at)
from seqdsl.eval.metrics import read_run
from seqdsl.eval.plot import plot

STEPS = (10, 20, 30, 40)


def write_run(root: Path, name: str, train: dict[int, float], code: list[float], *, model: str | None = None,
              extra_lines: list[str] = (), seq_len: int = 256) -> Path:
    run = root / name
    run.mkdir()
    lines = [json.dumps({"kind": "train", "step": s, "tokens": 100 * s, "loss": loss, "lr": 1e-3,
                         "tokens_per_s": 1.0, "mfu": None, "time": 0.0}) for s, loss in train.items()]
    for step, value in zip(STEPS, code):
        for domain, in_domain, loss in (("code", False, value), ("val", True, 9.9)):
            lines.append(json.dumps({"kind": "eval", "step": step, "tokens": 100 * step, "domain": domain,
                                     "in_domain": in_domain, "loss": loss, "bpb": loss / 2,
                                     "eval_tokens": 1000, "seq_len": seq_len}))
    (run / "metrics.jsonl").write_text("\n".join(lines + list(extra_lines)) + "\n")
    if model:
        (run / "config.json").write_text(json.dumps({"model": model}))
    return run


@pytest.fixture
def two_runs(tmp_path):
    a = write_run(tmp_path, "a", dict(zip(STEPS, (4.0, 3.5, 3.0, 2.5))), [5.0, 4.6, 4.4, 4.3], model="transformer")
    b = write_run(tmp_path, "b", dict(zip(STEPS, (4.2, 3.8, 3.4, 3.1))), [5.5, 5.2, 5.0, 4.9], model="mamba2")
    return a, b


def test_interpolation_and_gap_match_hand_computation(two_runs):
    cmp = compare([read_run(r) for r in two_runs], levels=[3.2, 3.0, 4.1], baseline="a", window=1)
    cell = cmp.cells
    # a: between (3.5, 4.6) and (3.0, 4.4): 4.6 + 0.6 * (4.4 - 4.6) = 4.48
    assert cell[("code", "a", 3.2)].value == pytest.approx(4.48)
    # b: between (3.4, 5.0) and (3.1, 4.9): 5.0 + (2/3) * (4.9 - 5.0)
    assert cell[("code", "b", 3.2)].value == pytest.approx(5.0 - 0.1 * 2 / 3)
    assert cell[("code", "b", 3.2)].gap == pytest.approx(5.0 - 0.1 * 2 / 3 - 4.48)
    assert cell[("code", "a", 3.0)].value == pytest.approx(4.4)  # exactly at an evaluation
    assert (cell[("code", "b", 3.0)].value, cell[("code", "b", 3.0)].status) == (None, NOT_REACHED)
    assert cell[("code", "a", 4.1)].status == BELOW_AT_FIRST
    assert cell[("code", "b", 4.1)].value == pytest.approx(5.5 + 0.25 * (5.2 - 5.5))
    assert cmp.domains == ["code"]  # in-domain evaluations are not OOD


def test_bits_per_byte_metric_interpolates_the_bpb_column(two_runs):
    cmp = compare([read_run(r) for r in two_runs], levels=[3.2], metric="bpb", window=1)
    assert cmp.cells[("code", "a", 3.2)].value == pytest.approx(4.48 / 2)


def test_default_levels_lie_inside_the_range_every_run_covers(two_runs):
    cmp = compare([read_run(r) for r in two_runs], window=1)
    # a covers [2.5, 4.0], b [3.1, 4.2]: shared [3.1, 4.0]
    assert cmp.levels == pytest.approx((3.1 + 0.9 * 0.25, 3.1 + 0.9 * 0.5, 3.1 + 0.9 * 0.75))
    assert all(c.status == "ok" for c in cmp.cells.values())


def test_runs_without_a_shared_range_get_no_levels_but_a_reason_and_a_plot(tmp_path):
    a = write_run(tmp_path, "a", dict(zip(STEPS, (4.0, 3.9, 3.8, 3.7))), [5, 5, 5, 5])
    b = write_run(tmp_path, "b", dict(zip(STEPS, (3.0, 2.9, 2.8, 2.7))), [5, 5, 5, 5])
    cmp = compare([read_run(a), read_run(b)], window=1)
    assert cmp.levels == () and "share no training-loss range" in cmp.note
    assert "choose levels with --at" in markdown(cmp)
    assert plot(cmp, tmp_path / "p.png").stat().st_size > 0


def test_runs_without_ood_evaluations_cannot_be_plotted(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 1, "tokens": 1, "loss": 3.0}) + "\n")
    cmp = compare([read_run(run)])
    assert "nothing to compare" in cmp.note
    with pytest.raises(SeqError, match="no OOD evaluations to plot"):
        plot(cmp, tmp_path / "p.png")


def test_training_loss_is_the_mean_of_the_last_window_records(tmp_path):
    run = write_run(tmp_path, "r", {s: float(s) for s in range(1, 41)}, [5, 5, 5, 5])
    train = read_run(run).train
    assert train_loss_at(train, 10, 3) == pytest.approx(9.0)
    assert train_loss_at(train, 2, 10) == pytest.approx(1.5)  # fewer records than the window
    assert train_loss_at(train, 0, 3) is None


def test_later_records_supersede_earlier_ones_and_a_truncated_tail_is_noted(tmp_path):
    resumed = json.dumps({"kind": "train", "step": 20, "tokens": 2000, "loss": 3.3})
    run = write_run(tmp_path, "r", dict(zip(STEPS, (4.0, 3.5, 3.0, 2.5))), [5, 5, 5, 5],
                    extra_lines=[resumed, '{"kind": "train", "st'])
    metrics = read_run(run)
    assert [p.loss for p in metrics.train] == [4.0, 3.3, 3.0, 2.5]
    assert len(metrics.notes) == 1 and "truncated" in metrics.notes[0]


def test_a_malformed_line_inside_the_file_names_file_and_line(tmp_path):
    # lines 1-3: one train and two eval records; line 4 is broken
    run = write_run(tmp_path, "r", {10: 4.0}, [5], extra_lines=["not json", "{}"])
    with pytest.raises(SeqFileError, match=r"metrics.jsonl:4: not a JSON record"):
        read_run(run)


def test_a_record_missing_a_field_is_named(tmp_path):
    run = write_run(tmp_path, "r", {10: 4.0}, [5], extra_lines=['{"kind": "eval", "step": 3}'])
    with pytest.raises(SeqFileError, match="eval record lacks domain"):
        read_run(run)


def test_evaluations_at_another_context_length_are_kept_apart(two_runs, tmp_path):
    a, _ = two_runs
    longer = json.dumps({"kind": "eval", "step": 20, "tokens": 0, "domain": "code", "in_domain": False,
                         "loss": 1.0, "bpb": 0.5, "eval_tokens": 10, "seq_len": 4096})
    with open(a / "metrics.jsonl", "a") as f:
        f.write(longer + "\n")
    default = compare([read_run(a)], levels=[3.2], window=1)
    assert default.curves[0].seq_len == 256  # the most common context length
    assert default.cells[("code", "a", 3.2)].value == pytest.approx(4.48)
    only_long = compare([read_run(a)], levels=[3.5], window=1, seq_len=4096)
    assert only_long.cells[("code", "a", 3.5)].value == pytest.approx(1.0)


def test_markdown_and_json_carry_the_same_cells(two_runs):
    cmp = compare([read_run(r) for r in two_runs], levels=[3.2, 3.0], baseline="a", window=1)
    table = markdown(cmp)
    assert "| a (baseline) | transformer | 256 | 4.4800 |  | 4.4000 |  |" in table
    assert "| b | mamba2 | 256 | 4.9333 | +0.4533 | not reached |  |" in table
    data = to_json(cmp)
    cells = {(r["run"], r["level"]): r for r in data["table"]}
    assert cells[("b", 3.2)]["gap"] == pytest.approx(0.45333333)
    assert cells[("b", 3.0)]["status"] == "not reached"
    json.dumps(data)  # serialisable


def test_cli_prints_table_writes_plot_and_json(two_runs, tmp_path, capsys):
    png, out = tmp_path / "cmp.png", tmp_path / "cmp.json"
    code = main(["compare", *map(str, two_runs), "--baseline", "b", "--at", "3.2", "--window", "1",
                 "--plot", str(png), "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| b (baseline) | mamba2 |" in printed and "-0.4533" in printed
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert json.loads(out.read_text())["baseline"] == "b"


@pytest.mark.parametrize("argv, message", [
    (["compare", "{tmp}/missing"], "no such run directory"),
    (["compare", "{a}", "--baseline", "zzz", "--no-plot"], "baseline 'zzz' is not one of the runs"),
    (["compare", "{a}", "--at", "x", "--no-plot"], "bad --at"),
])
def test_cli_user_errors_are_one_message_and_exit_2(two_runs, tmp_path, capsys, argv, message):
    a, _ = two_runs
    argv = [w.format(tmp=tmp_path, a=a) for w in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
