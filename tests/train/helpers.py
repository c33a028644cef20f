"""A micro spec and small domain-labelled shards written into a test's tmp dir, so training tests
run in seconds and need no data files."""

from __future__ import annotations

import json
import random
from pathlib import Path

MICRO_SPEC = """
mixer attn {
    heads = 2
    head_dim = 8
    position = rope
}
model micro {
    layers = 1
    d_model = 16
    vocab = 256
    context = 16
    mixer = attn
}
"""

WORDS = {
    "web": "the a my we day blog love friend went today night really think know good time".split(),
    "code": "def return self if else for in import class None True x y = ( ) : [ ]".split(),
}


def documents(domain: str, n: int, seed: int = 0) -> list[str]:
    rng = random.Random(f"{domain}-{seed}")
    return [" ".join(rng.choice(WORDS[domain]) for _ in range(rng.randint(20, 60))) for _ in range(n)]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_shards(root: Path, n: int = 60) -> Path:
    """root/web/web_00.jsonl and root/code/code_00.jsonl: domain = folder name."""
    for domain in WORDS:
        write_jsonl(root / domain / f"{domain}_00.jsonl",
                    [{"text": t, "meta": {"domain": domain}} for t in documents(domain, n)])
    return root


def micro_run_args(tmp: Path, *, steps: int = 8, batch: int = 4, extra: list[str] = ()) -> list[str]:
    """`seqdsl train` arguments for a micro run on shards in tmp (seq_len 16)."""
    spec = tmp / "micro.seq"
    spec.write_text(MICRO_SPEC)
    data = write_shards(tmp / "data")
    sets = {"preset": "null", "data.source": "files", "data.files": json.dumps([str(data)]),
            "data.train_domains": '["web"]', "data.heldout": "0.2", "data.eval_tokens": "200",
            "eval_every": "4", "checkpoint_every": "2", "warmup": "2", "lr": "0.01"}
    args = ["train", str(spec), "--tokens", str(steps * batch * 16), "--batch", str(batch), "--quiet",
            "--device", "cpu"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return args + list(extra)
