"""Recall-token loss (seqdsl/run/recall.py) against a hand-worked example and a loop oracle."""

from __future__ import annotations

import math

import torch

from seqdsl.run.recall import RecallSplit, RecallSplits, recall_mask, split_nll


def test_hand_worked_example():
    # text 5 6 7 5 6 8 5 6 7; the targets' bigrams, position by position:
    # (5,6) (6,7) (7,5) (5,6)* (6,8) (8,5) (5,6)* (6,7)*   (* seen earlier: recall tokens)
    text = torch.tensor([[5, 6, 7, 5, 6, 8, 5, 6, 7]])
    x, y = text[:, :-1], text[:, 1:]
    assert recall_mask(x, y).tolist() == [[False, False, False, True, False, False, True, True]]

    nll = [0.3, 1.1, 2.0, 0.7, 0.5, 1.9, 0.2, 1.4]  # per-token losses, as the evaluation gives them
    split = split_nll(torch.tensor([nll], dtype=torch.float64), x, y)
    assert split.recall_tokens == 3 and split.other_tokens == 5
    assert math.isclose(split.recall_loss, (nll[3] + nll[6] + nll[7]) / 3, rel_tol=1e-6)
    assert math.isclose(split.other_loss, (nll[0] + nll[1] + nll[2] + nll[4] + nll[5]) / 5, rel_tol=1e-6)


def test_mask_matches_a_loop_over_earlier_positions():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 6, (4, 40), generator=g), torch.randint(0, 6, (4, 40), generator=g)
    expected = [[any((x[b, j], y[b, j]) == (x[b, t], y[b, t]) for j in range(t)) for t in range(40)]
                for b in range(4)]
    assert recall_mask(x, y).tolist() == expected
    assert 0 < recall_mask(x, y).sum() < 160, "both kinds occur"


def test_rows_do_not_share_bigrams_and_splits_add():
    x, y = torch.tensor([[1, 1], [2, 1]]), torch.tensor([[2, 2], [1, 9]])
    assert recall_mask(x, y).tolist() == [[False, True], [False, False]]
    # batches observed one by one add up to the split of all their rows at once
    nll = torch.tensor([[0.5, 1.5], [2.0, 4.0]], dtype=torch.float64)
    splits = RecallSplits()
    observe = splits("d")
    observe(nll[:1], x[:1], y[:1])
    observe(nll[1:], x[1:], y[1:])
    assert splits.split("d") == split_nll(nll, x, y) == RecallSplit(1.5, 1, 6.5, 3)
    assert splits.fields("d") == {"recall_loss": 1.5, "recall_tokens": 1, "other_loss": 6.5 / 3}
    assert RecallSplit(0.0, 0, 1.0, 1).recall_loss is None


def test_eval_recall_splits_the_loss_of_the_same_windows(tmp_path, monkeypatch, capsys):
    """`seqdsl eval --recall`: the recall and other tokens are the evaluation's scored tokens, and
    their losses weighted by their counts give back the ordinary loss, computed separately."""
    import json

    import seqdsl.eval.sets
    from seqdsl.cli.main import main
    from tests.eval.test_eval_cli import small_sets, write_run

    run, _ = write_run(tmp_path)
    monkeypatch.setattr(seqdsl.eval.sets, "run_eval_sets", lambda config, **kw: small_sets())
    out = tmp_path / "eval.json"
    assert main(["eval", str(run), "--recall", "--out", str(out)]) == 0
    assert "recall loss" in capsys.readouterr().out
    for r in json.loads(out.read_text())["records"]:
        other_tokens = r["eval_tokens"] - r["recall_tokens"]
        assert r["recall_tokens"] > 0 and other_tokens > 0  # the sets repeat a sentence
        whole = (r["recall_loss"] * r["recall_tokens"] + r["other_loss"] * other_tokens) / r["eval_tokens"]
        assert math.isclose(whole, r["loss"], rel_tol=1e-5)


def _evals(run) -> list[dict]:
    import json

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "eval"]


def test_training_evaluations_record_the_split_of_their_own_loss(tmp_path):
    """`seqdsl train` (eval_recall on by default): every eval record splits its loss, and the two
    parts weighted by their token counts give back the record's loss; off, the fields are absent."""
    from seqdsl.cli.main import main
    from tests.train.helpers import micro_run_args

    assert main(micro_run_args(tmp_path, steps=4) + ["--out", str(tmp_path / "on")]) == 0
    evals = _evals(tmp_path / "on")
    assert evals and {r["domain"] for r in evals} == {"web", "code"}
    for r in evals:
        other_tokens = r["eval_tokens"] - r["recall_tokens"]
        assert r["recall_tokens"] > 0 and other_tokens > 0  # 16-word vocabularies repeat bigrams
        whole = (r["recall_loss"] * r["recall_tokens"] + r["other_loss"] * other_tokens) / r["eval_tokens"]
        assert math.isclose(whole, r["loss"], rel_tol=1e-5)
    (tmp_path / "b").mkdir()
    off = micro_run_args(tmp_path / "b", steps=4) + ["--set", "eval_recall=false", "--out", str(tmp_path / "off")]
    assert main(off) == 0
    assert all("recall_loss" not in r for r in _evals(tmp_path / "off"))
