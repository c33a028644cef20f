"""Two processes (torchrun, gloo on CPU), each reading its own half of every global batch, give
the losses of one process that runs the same global batch as two accumulated micro batches."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seqdsl.cli.main import main
from tests.train.helpers import micro_run_args

ROOT = Path(__file__).resolve().parents[2]


def _losses(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == "train"]


@pytest.mark.slow
def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    args = micro_run_args(tmp_path, steps=6, batch=4) + ["--set", "micro_batch=2"]
    assert main(args + ["--out", str(tmp_path / "one")]) == 0
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "seqdsl.cli.main", *args, "--out", str(tmp_path / "two")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(one) == len(two) == 6
    for a, b in zip(one, two):
        assert abs(a - b) <= 1e-5 * abs(a), (one, two)
    # the evaluations: each process scored half the windows; the losses and the recall split,
    # summed over the two, are the one process's
    evals = [[r for r in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())
              if r["kind"] == "eval"] for run in ("one", "two")]
    assert len(evals[0]) == len(evals[1]) > 0
    for a, b in zip(*evals):
        assert (a["domain"], a["recall_tokens"], a["eval_tokens"]) == (b["domain"], b["recall_tokens"], b["eval_tokens"])
        for key in ("loss", "recall_loss", "other_loss"):
            assert abs(a[key] - b[key]) <= 1e-5 * abs(a[key]), (key, a, b)
    config = json.loads((tmp_path / "two" / "config.json").read_text())
    assert (config["processes"], config["micro_batch"], config["accumulation"]) == (2, 2, 1)
