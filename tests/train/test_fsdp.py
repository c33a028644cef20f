"""FSDP2 (`parallel = "fsdp"`) and checkpoints that move between parallelisms.

Fast: a checkpoint written from an FSDP2-sharded model (a one-process gloo group, in this
process) holds the full state: loaded into a plain model it gives the same weights, the same
optimizer state and therefore the same next step as the model that was never sharded.
Slow: two processes under torchrun (gloo, CPU) with FSDP2 and gradient accumulation give the
one-process loss curve; a run checkpointed under FSDP2 resumes in one process, and one
checkpointed in one process resumes under FSDP2, both onto the uninterrupted curve.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch import nn

from seqdsl.cli.main import main
from seqdsl.run import checkpoint
from tests.train.helpers import micro_run_args

ROOT = Path(__file__).resolve().parents[2]
REL = 1e-5  # float-sum order differs between layouts; a wrong gradient or state is off by far more


class Tied(nn.Module):
    """Embedding tied to the head, two blocks: the shapes that matter to sharding and saving."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))
        self.head = nn.Linear(8, 11, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = x + torch.tanh(block(x))
        return self.head(x)


def _step(model, opt, tokens):
    loss = nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()


@pytest.fixture
def one_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module")  # Linear's 3-D output is a view; nothing writes into it
def test_checkpoint_of_a_sharded_model_loads_into_a_plain_one(tmp_path, one_process_group):
    from torch.distributed.fsdp import fully_shard

    tokens = torch.randint(0, 11, (4, 9), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    plain = Tied()
    torch.manual_seed(0)
    sharded = Tied()
    for block in sharded.blocks:
        fully_shard(block)
    fully_shard(sharded)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (plain, sharded)]
    for _ in range(2):
        assert _step(plain, opts[0], tokens) == pytest.approx(_step(sharded, opts[1], tokens), rel=REL)
    saved = checkpoint.save(tmp_path / "ckpt", 2, sharded, opts[1], {}, "spec")
    assert "head.weight" not in load_file(saved / "model.safetensors"), "a tied weight is stored once"

    fresh = Tied()  # another init: everything must come from the checkpoint
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    checkpoint.restore(checkpoint.load_latest(tmp_path / "ckpt"), fresh, fresh_opt)
    assert fresh.head.weight is fresh.embed.weight, "still tied"
    for name, value in plain.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[name], value, rtol=REL, atol=0)
    expected = [opts[0].state[p]["exp_avg_sq"] for p in plain.parameters()]
    got = [fresh_opt.state[p]["exp_avg_sq"] for p in fresh.parameters()]
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=REL, atol=1e-12)
    assert _step(fresh, fresh_opt, tokens) == pytest.approx(_step(plain, opts[0], tokens), rel=REL)


def test_checkpoint_stores_a_tied_weight_once_under_one_name(tmp_path):
    model = Tied()
    opt = torch.optim.AdamW(model.parameters())
    _step(model, opt, torch.zeros(2, 5, dtype=torch.long))
    path = checkpoint.save(tmp_path, 1, model, opt, {}, "spec")
    assert "head.weight" not in load_file(path / "model.safetensors")
    saved = torch.load(path / "optimizer.pt", weights_only=True)
    assert set(saved["state"]) == {n for n, _ in model.named_parameters()}, "keyed by name, not position"


def _losses(run: Path, kind: str = "train") -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == kind]


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= REL * abs(x) for x, y in zip(a, b))


def _torchrun(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "seqdsl.cli.main", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _rewound(run: Path, to: Path, step: int) -> Path:
    """A copy of `run` whose newest checkpoint is the one of `step`: a run stopped there."""
    shutil.copytree(run, to)
    (to / "checkpoints" / "latest").write_text(checkpoint.step_name(step))
    return to


@pytest.mark.slow
def test_fsdp_matches_one_process_and_resumes_across_parallelisms(tmp_path):
    args = micro_run_args(tmp_path, steps=6, batch=4) + ["--set", "micro_batch=1", "--set", "keep_checkpoints=5"]
    fsdp = args + ["--set", "parallel=fsdp"]
    assert main(args + ["--out", str(tmp_path / "one")]) == 0
    _torchrun(fsdp + ["--out", str(tmp_path / "fsdp")])
    one, sharded = _losses(tmp_path / "one"), _losses(tmp_path / "fsdp")
    assert len(one) == 6 and _close(one, sharded), (one, sharded)
    config = json.loads((tmp_path / "fsdp" / "config.json").read_text())
    assert (config["processes"], config["parallel"], config["accumulation"]) == (2, "fsdp", 2)

    to_one = _rewound(tmp_path / "fsdp", tmp_path / "fsdp_then_one", 2)
    assert main(args + ["--out", str(to_one), "--resume"]) == 0
    to_fsdp = _rewound(tmp_path / "one", tmp_path / "one_then_fsdp", 4)
    _torchrun(fsdp + ["--out", str(to_fsdp), "--resume"])
    for resumed in (to_one, to_fsdp):
        assert _close(_losses(resumed), one), (resumed.name, _losses(resumed), one)
        assert _close(_losses(resumed, "eval"), _losses(tmp_path / "one", "eval"))


@pytest.mark.slow
def test_fsdp_with_the_compiled_step_matches_one_process(tmp_path):
    """`compile = true` under FSDP2: the compiled body must be training_hidden as FSDP2 registers
    it (its hooks gather the sharded embedding); compiled before the wrapping, it saw a sharded
    embedding weight and failed to trace."""
    args = micro_run_args(tmp_path, steps=4, batch=4) + ["--set", "micro_batch=1", "--set", "compile=true"]
    assert main(args + ["--out", str(tmp_path / "one")]) == 0
    _torchrun(args + ["--set", "parallel=fsdp", "--out", str(tmp_path / "fsdp")])
    one, sharded = _losses(tmp_path / "one"), _losses(tmp_path / "fsdp")
    assert len(one) == 4 and _close(one, sharded), (one, sharded)
