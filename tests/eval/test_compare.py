"""`seqdsl compare` on synthetic metrics.jsonl files whose interpolated values are computed by hand."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from seqdsl.cli.main import main
from seqdsl.errors import SeqError, SeqFileError
from seqdsl.eval.compare import (
    BELOW_AT_FIRST, EARLY, NOT_REACHED, SPARSE, compare, markdown, to_json, train_loss_at)
from seqdsl.eval.metrics import read_run
from seqdsl.eval.plot import figure, plot
from seqdsl.run.records import eval_records

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


def test_recall_loss_metric_interpolates_the_recall_column_and_refuses_runs_without_it(two_runs, tmp_path):
    for run in two_runs:  # the recall loss of every eval record: its loss + 1
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for r in rows:
            if r["kind"] == "eval":
                r.update(recall_loss=r["loss"] + 1, recall_tokens=10, other_loss=r["loss"] - 0.1)
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmp = compare([read_run(r) for r in two_runs], levels=[3.2], metric="recall_loss", window=1)
    assert cmp.cells[("code", "a", 3.2)].value == pytest.approx(4.48 + 1)
    assert "recall tokens" in markdown(cmp)
    plain = write_run(tmp_path, "plain", dict(zip(STEPS, (4.0, 3.5, 3.0, 2.5))), [5.0, 4.6, 4.4, 4.3])
    with pytest.raises(SeqError, match="no recall split in the evaluations of plain"):
        compare([read_run(two_runs[0]), read_run(plain)], metric="recall_loss")
    # a run with the split at its later evaluations only: the earlier ones are left out, with a warning
    rows = [json.loads(line) for line in (plain / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        if r["kind"] == "eval" and r["step"] >= 30:
            r.update(recall_loss=r["loss"] + 1, recall_tokens=10, other_loss=r["loss"])
    (plain / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmp = compare([read_run(two_runs[0]), read_run(plain)], metric="recall_loss", levels=[2.75])
    assert "plain: 4 of its 8 evaluations have no recall split and are left out" in cmp.warnings
    assert [p.step for p in cmp.curves[1].domains["code"]] == [30, 40]


def test_default_levels_lie_inside_the_range_every_run_covers(two_runs):
    cmp = compare([read_run(r) for r in two_runs], window=1)
    # from their second evaluations on, a covers [2.5, 3.5] and b [3.1, 3.8]: shared [3.1, 3.5],
    # levels at 75/50/25 % of it, from high training loss to low
    assert cmp.levels == pytest.approx((3.1 + 0.4 * 0.75, 3.1 + 0.4 * 0.5, 3.1 + 0.4 * 0.25))
    assert all(c.status == "ok" for c in cmp.cells.values())


def test_runs_without_a_shared_range_get_no_levels_but_a_reason_and_a_plot(tmp_path):
    a = write_run(tmp_path, "a", dict(zip(STEPS, (4.0, 3.9, 3.8, 3.7))), [5, 5, 5, 5])
    b = write_run(tmp_path, "b", dict(zip(STEPS, (3.0, 2.9, 2.8, 2.7))), [5, 5, 5, 5])
    cmp = compare([read_run(a), read_run(b)], window=1)
    assert cmp.levels == () and "share no training-loss range" in cmp.note
    assert "choose levels with --at" in markdown(cmp)
    assert plot(cmp, tmp_path / "p.png").stat().st_size > 0


def test_runs_without_evaluations_cannot_be_plotted(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 1, "tokens": 1, "loss": 3.0}) + "\n")
    cmp = compare([read_run(run)])
    assert "nothing to compare" in cmp.note
    with pytest.raises(SeqError, match="no evaluations to plot"):
        plot(cmp, tmp_path / "p.png")


def test_runs_evaluated_in_domain_only_are_plotted_on_their_held_out_text(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    rows = [{"kind": "train", "step": s, "tokens": s, "loss": 5 - s / 10} for s in range(1, 11)]
    rows += [{"kind": "eval", "step": s, "tokens": s, "domain": "blogs", "in_domain": True, "loss": 5 - s / 9,
              "bpb": 1.0, "seq_len": 16} for s in (2, 6, 10)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fig = figure(compare([read_run(run)]))
    try:
        [ax] = [a for a in fig.axes if a.get_visible()]
        assert ax.get_title() == "in-domain, held out: blogs"
        assert list(ax.lines[0].get_ydata()) == pytest.approx([5 - s / 9 for s in (2, 6, 10)])
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


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
    # a at 3.2: between training losses 3.5 and 3.0, 0.5 apart, over a quarter of a's range 1.5:
    # sparse (!); a at 3.0 is exactly its evaluation at step 30; b at 3.2: 0.3 > 1.1 / 4, sparse
    assert ("| a (baseline) | transformer | 256 | 4.4800! |  | 4.4000 |  | 4.3000 (train 2.500, step 40) |"
            in table)
    assert "| b | mamba2 | 256 | 4.9333! | +0.4533! | not reached |  | 4.9000 (train 3.100, step 40) |" in table
    data = to_json(cmp)
    cells = {(r["run"], r["level"]): r for r in data["table"] if not r["in_domain"]}
    assert cells[("b", 3.2)]["gap"] == pytest.approx(0.45333333)
    assert (cells[("b", 3.2)]["flags"], cells[("b", 3.2)]["steps"]) == (["sparse"], [30, 40])
    assert (cells[("a", 3.0)]["flags"], cells[("a", 3.0)]["steps"]) == ([], [30, 30])
    assert cells[("b", 3.0)]["status"] == "not reached"
    assert {r["domain"] for r in data["table"] if r["in_domain"]} == {"val"}
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
    (["compare", "{a}", "--plot", "{tmp}/cmp.txt"], "cannot write a plot as .txt"),
    (["compare", "{a}", "--plot", "{tmp}"], "is a directory"),
    (["compare", "{a}", "--no-plot", "--out", "{a}/metrics.jsonl"], "is part of the run"),
    (["compare", "{a}", "--plot", "{a}/checkpoints/cmp.png"], "is part of the run"),
    (["compare", "{a}", "--no-plot", "--out", "{tmp}/nowhere/cmp.json"], "does not exist"),
    (["compare", "{a}", "--no-plot", "--seq-len", "999"], "no run has an evaluation at --seq-len 999"),
])
def test_cli_user_errors_are_one_message_and_exit_2(two_runs, tmp_path, capsys, argv, message):
    a, _ = two_runs
    argv = [w.format(tmp=tmp_path, a=a) for w in argv]
    before = {p: p.read_bytes() for p in a.rglob("*") if p.is_file()}
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert captured.out == ""  # refused before any work
    assert {p: p.read_bytes() for p in a.rglob("*") if p.is_file()} == before


def test_a_plot_named_without_a_suffix_is_reported_where_it_is_written(two_runs, tmp_path, capsys):
    assert main(["compare", *map(str, two_runs), "--plot", str(tmp_path / "cmp")]) == 0
    assert f"plot: {tmp_path / 'cmp.png'}" in capsys.readouterr().out
    assert (tmp_path / "cmp.png").read_bytes()[:4] == b"\x89PNG"


# Run folders as `seqdsl train` writes them (seqdsl/train/run.py), with hand-chosen numbers.


def write_training_run(root: Path, name: str, block_means: tuple[float, ...], evals: dict[str, list[float]], *,
                       model: str, eval_every: int = 10, train_domain: str = "docstrings") -> Path:
    """A train record per step and, every `eval_every` steps, the eval records of `eval_records`
    (the writer training uses). The records of block k (the steps up to evaluation k) alternate
    between its mean + 0.1 and - 0.1, so the default 10-record window places evaluation k at
    training loss `block_means[k]`. `evals`: domain -> its loss at each evaluation; the training
    domain is in-domain, the others OOD."""
    run = root / name
    run.mkdir()
    records, tokens, step = [], 0, 0
    for k, mean in enumerate(block_means):
        for j in range(eval_every):
            step, tokens = step + 1, tokens + 2048
            records.append({"kind": "train", "step": step, "tokens": tokens, "loss": mean + (0.1 if j % 2 else -0.1),
                            "lr": 3e-3, "tokens_per_s": 5000.0, "mfu": None, "time": 0.1 * step})
        results = {d: SimpleNamespace(loss=v[k], bpb=v[k] / 0.7, tokens=8192) for d, v in evals.items()}
        records += eval_records(results, {d: d == train_domain for d in evals}, step=step, tokens=tokens,
                                seq_len=128)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "config.json").write_text(json.dumps({
        "model": None, "model_name": model, "seq_len": 128, "eval_every": eval_every, "steps": step,
        "train_domains": [train_domain], "ood_domains": sorted(set(evals) - {train_domain})}))
    return run


TRANSFORMER = (6.0, 4.0, 3.6, 3.4, 3.2)  # training loss at the evaluations of steps 10, 20, ..., 50
MAMBA2 = (6.4, 4.2, 3.8, 3.5, 3.3)


@pytest.fixture
def issue_runs(tmp_path):
    """Shaped like issue 20's runs: the training loss falls fast to the second evaluation and slowly
    after it; Mamba-2 is worse OOD at its first evaluation and better at every later one. The
    held-out in-domain loss is the training loss + 0.1 throughout."""
    t = write_training_run(tmp_path, "transformer", TRANSFORMER, {
        "docstrings": [x + 0.1 for x in TRANSFORMER], "code": [7.0, 5.0, 4.8, 4.7, 4.6]}, model="transformer_tiny")
    m = write_training_run(tmp_path, "mamba2", MAMBA2, {
        "docstrings": [x + 0.1 for x in MAMBA2], "code": [8.4, 5.1, 4.7, 4.5, 4.4]}, model="mamba2_tiny")
    return t, m


def lerp(level: float, a: tuple[float, float], b: tuple[float, float]) -> float:
    """The value at `level` on the straight line through a and b, (training loss, value) pairs."""
    return a[1] + (level - a[0]) / (b[0] - a[0]) * (b[1] - a[1])


def test_defaults_match_a_hand_computed_case(issue_runs):
    cmp = compare([read_run(r) for r in issue_runs])  # default baseline, levels and window
    assert cmp.baseline == "transformer"  # the first run
    # From the second evaluation on, transformer covers [3.2, 4.0] and mamba2 [3.3, 4.2]: shared
    # [3.3, 4.0]; levels at 75/50/25 % of it. (Over whole runs the shared range is [3.3, 6.0],
    # whose 50 and 75 % points lie between both runs' first two evaluations.)
    assert cmp.levels == pytest.approx((3.825, 3.65, 3.475))
    code = {  # level: (transformer, mamba2), between the evaluations that bracket the level
        3.825: (lerp(3.825, (4.0, 5.0), (3.6, 4.8)), lerp(3.825, (4.2, 5.1), (3.8, 4.7))),
        3.65: (lerp(3.65, (4.0, 5.0), (3.6, 4.8)), lerp(3.65, (3.8, 4.7), (3.5, 4.5))),
        3.475: (lerp(3.475, (3.6, 4.8), (3.4, 4.7)), lerp(3.475, (3.5, 4.5), (3.3, 4.4))),
    }
    for level, (t, m) in zip(cmp.levels, code.values()):
        assert cmp.cells[("code", "transformer", level)].value == pytest.approx(t)
        assert cmp.cells[("code", "mamba2", level)].value == pytest.approx(m)
        assert cmp.cells[("code", "mamba2", level)].gap == pytest.approx(m - t) and m < t
        # the in-domain row: held-out = training loss + 0.1 at every evaluation, so at every level
        for run in ("transformer", "mamba2"):
            assert cmp.in_domain_cells[("docstrings", run, level)].value == pytest.approx(level + 0.1)
        assert cmp.in_domain_cells[("docstrings", "mamba2", level)].gap == pytest.approx(0.0)
    assert cmp.warnings == () and not any(c.flags for c in [*cmp.cells.values(), *cmp.in_domain_cells.values()])
    table = markdown(cmp)
    assert table.index("### docstrings (in-domain") < table.index("### code (OOD)")
    # model column from config.json's model_name; gap 4.725 - 4.9125
    assert "| mamba2 | mamba2_tiny | 128 | 4.7250 | -0.1875 |" in table
    assert "| 4.4000 (train 3.300, step 50) |" in table  # mamba2's last evaluation of code


def test_levels_outside_a_run_are_never_extrapolated(issue_runs):
    cmp = compare([read_run(r) for r in issue_runs], levels=[6.2, 3.25])
    t_high, m_high = (cmp.cells[("code", r, 6.2)] for r in ("transformer", "mamba2"))
    assert (t_high.value, t_high.status, t_high.gap) == (None, BELOW_AT_FIRST, None)  # first eval at 6.0
    assert m_high.value == pytest.approx(lerp(6.2, (6.4, 8.4), (4.2, 5.1))) and m_high.gap is None
    # 2.2 apart, over a quarter of mamba2's range 6.4 - 3.3, and before its second evaluation
    assert m_high.flags == (EARLY, SPARSE) and m_high.steps == (10, 20)
    t_low, m_low = (cmp.cells[("code", r, 3.25)] for r in ("transformer", "mamba2"))
    assert t_low.value == pytest.approx(lerp(3.25, (3.4, 4.7), (3.2, 4.6))) and t_low.flags == ()
    assert (m_low.value, m_low.status, m_low.gap) == (None, NOT_REACHED, None)  # lowest is 3.3


def test_values_from_the_first_or_a_sparse_interval_are_flagged_and_warned(tmp_path):
    # training losses 5.0, 4.8, 4.6, 3.0, 2.9 span 2.1: an interval wider than 2.1 / 4 is sparse
    losses = (5.0, 4.8, 4.6, 3.0, 2.9)
    run = write_training_run(tmp_path, "r", losses, {"docstrings": list(losses), "code": [9, 8, 7, 6, 5]},
                             model="m")
    cmp = compare([read_run(run)], levels=[5.0, 4.9, 4.8, 4.7, 3.5, 2.95])
    flags = {lv: cmp.cells[("code", "r", lv)].flags for lv in cmp.levels}
    assert flags == {5.0: (EARLY,), 4.9: (EARLY,), 4.8: (), 4.7: (), 3.5: (SPARSE,), 2.95: ()}
    assert cmp.cells[("code", "r", 3.5)].value == pytest.approx(lerp(3.5, (4.6, 7), (3.0, 6)))
    assert cmp.in_domain_cells[("docstrings", "r", 4.9)].flags == (EARLY,)
    assert cmp.warnings == (  # one line per stretch of training, whichever domains it flags
        "r at 5.000: exactly its first evaluation (step 10), before its second",
        "r at 4.900: interpolated between steps 10 and 20 (training loss 5.000 -> 4.800): before its second "
        "evaluation",
        "r at 3.500: interpolated between steps 30 and 40 (training loss 4.600 -> 3.000): a sparse interval "
        "(1.600 wide, over 25 % of the 2.100 its evaluations span)")
    assert "| r (baseline) | m | 128 | 9.0000! |  | 8.5000! |  | 8.0000 |" in markdown(cmp)


def test_runs_evaluated_twice_like_the_readme_run_get_flagged_levels_not_an_error(tmp_path, capsys):
    # the README's tiny run: 100 steps, evaluations at steps 50 and 100 only
    domains = {"docstrings": [3.2, 2.9], "code": [3.3, 3.1], "manual": [3.2, 3.0]}
    a = write_training_run(tmp_path, "a", (3.25, 2.95), domains, model="transformer_tiny", eval_every=50)
    b = write_training_run(tmp_path, "b", (3.24, 2.70), domains, model="mamba2_tiny", eval_every=50)
    cmp = compare([read_run(a), read_run(b)])
    # nothing is shared from the second evaluations on (single points 2.95 and 2.70): the levels
    # fall back to the whole shared range [2.95, 3.24]
    assert cmp.levels == pytest.approx(tuple(2.95 + 0.29 * f for f in (0.75, 0.5, 0.25)))
    assert "share none" in cmp.levels_note
    assert all(c.flags == (EARLY, SPARSE) for c in [*cmp.cells.values(), *cmp.in_domain_cells.values()])
    assert cmp.warnings[0] == ("a at 3.168, 3.095, 3.023: interpolated between steps 50 and 100 (training loss "
                               "3.250 -> 2.950), its only two evaluations")
    png = tmp_path / "p.png"
    assert main(["compare", str(a), str(b), "--plot", str(png)]) == 0
    captured = capsys.readouterr()
    assert "its only two evaluations" in captured.out and png.stat().st_size > 0
    # 3 levels x 2 runs x 3 domains
    assert "warning: 18 table value(s) are interpolated across early or sparse evaluations" in captured.err


def test_runs_evaluated_once_get_a_reason_and_their_last_evaluation(tmp_path, capsys):
    domains = {"docstrings": [2.9], "code": [3.1]}
    a = write_training_run(tmp_path, "a", (2.95,), domains, model="transformer_tiny", eval_every=100)
    b = write_training_run(tmp_path, "b", (2.70,), domains, model="mamba2_tiny", eval_every=100)
    assert main(["compare", str(a), str(b), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "No training-loss levels: a, b evaluated only once" in out
    assert "| b | mamba2_tiny | 128 | 3.1000 (train 2.700, step 100) |" in out


def test_the_plot_legend_names_the_level_lines(issue_runs):
    cmp = compare([read_run(r) for r in issue_runs])
    fig = figure(cmp)  # selects matplotlib's Agg backend
    from matplotlib import pyplot as plt

    try:
        ax = fig.axes[0]
        assert "matched-loss levels of the table: 3.825, 3.650, 3.475" in [
            t.get_text() for t in ax.get_legend().get_texts()]
        dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert sorted(line.get_xdata()[0] for line in dotted) == pytest.approx(sorted(cmp.levels))
    finally:
        plt.close(fig)
