"""The reproduction study of arXiv 2505.18522 with seqdsl's own commands (docs/results.md).

Every run is `seqdsl train SPEC --config recipes/study_{limited,mixed}_110m.toml --seed S`,
then `seqdsl eval RUN --seq-len L` at 2x and 4x the training context. This script only decides
the order, spreads the runs over the GPUs (one training per GPU), resumes what a lost machine
left unfinished, and records what ran where:

    python experiments/study.py plan                                   # the runs and their commands
    python experiments/study.py prepare --data DATA --setting limited  # the token cache, ahead
                                                                       # (--setting pending: what is left)
    python experiments/study.py run --data DATA --runs RUNS --gpus 2   # run what is not finished
    python experiments/study.py status --runs RUNS                     # progress of every run
    python experiments/study.py collect --runs RUNS                    # records -> docs/results/runs/

DATA holds one folder per domain (web_blogs, wikipedia, arxiv, stackexchange, books, code; the
code domain from experiments/build_code_domain.py) and tokenizers/gpt-neox-20b/tokenizer.json.
Each run directory gets `study.json` beside seqdsl's own records: the exact commands, the GPU,
wall times and exit codes. `collect` copies the records of finished runs (never checkpoints)
into the repository, where experiments/report.py turns them into docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))
from gpu_jobs import gpu_name, pool, sayer, timed  # noqa: E402
RECORDS = REPO / "docs" / "results" / "runs"
DOMAINS = ("web_blogs", "wikipedia", "arxiv", "stackexchange", "books", "code")
TOKENIZER = Path("tokenizers") / "gpt-neox-20b" / "tokenizer.json"
RECIPES = {"limited": "recipes/study_limited_110m.toml", "mixed": "recipes/study_mixed_110m.toml"}
LENGTHS = (2, 4)  # evaluation contexts, as multiples of the training context
# held-out tokens per domain at those lengths: a quarter of the recipe's eval_tokens, since
# `seqdsl eval` runs uncompiled (the chunked references of the stateful specs are slow there)
LENGTH_EVAL_TOKENS = 131_072
RECORD_FILES = ("metrics.jsonl", "config.json", "spec.seq", "study.json", "train.log")


@dataclass(frozen=True)
class Run:
    spec: str  # a file of specs/, without .seq
    setting: str = "limited"  # limited | mixed
    seed: int = 0

    @property
    def name(self) -> str:
        return f"{self.setting}-{self.spec}-s{self.seed}"


# In the order they run: first one of every spec the paper's argument needs, then the repeats
# that measure the seed spread, then the ablation and the mixed-domain setting. A machine that
# is taken back leaves the least important runs undone.
STUDY: tuple[Run, ...] = (
    Run("transformer"), Run("top1_chunk_exact"), Run("mamba2"), Run("window_256"),
    Run("linear_attention"), Run("top1_chunk_approx"), Run("top1_element"), Run("transformer", seed=1),
    Run("temperature_4"), Run("random_keys"), Run("temperature_0_5"), Run("rwkv7"),
    Run("transformer", seed=2), Run("mamba2", seed=1), Run("gated_deltanet"), Run("mamba2_no_conv"),
    Run("mamba2", seed=2),
    Run("transformer", "mixed"), Run("mamba2", "mixed"), Run("top1_chunk_exact", "mixed"),
)


def data_overrides(data: Path, tokenizer: str | None = None) -> list[str]:
    files = json.dumps([str(data / d) for d in DOMAINS])
    return ["--set", f"data.files={files}", "--set", f"data.tokenizer={tokenizer or data / TOKENIZER}"]


def train_command(run: Run, data: Path, out: Path, resume: bool, extra: tuple[str, ...] = (),
                  tokenizer: str | None = None) -> list[str]:
    """The study's command for one run; `extra` (for a dry run on a CPU only) goes last, so it wins."""
    cmd = ["seqdsl", "train", f"specs/{run.spec}.seq", "--config", RECIPES[run.setting], "--seed", str(run.seed),
           "--out", str(out), *data_overrides(data, tokenizer), *extra]
    return cmd + ["--resume"] if resume else cmd


def eval_command(out: Path, seq_len: int) -> list[str]:
    return ["seqdsl", "eval", str(out), "--seq-len", str(seq_len), "--max-tokens", str(LENGTH_EVAL_TOKENS),
            "--out", str(out / f"eval_seq{seq_len}.json")]


def _records(out: Path) -> tuple[int, list[dict]] | None:
    """(steps the run is configured for, its metrics records), or None before it has any."""
    try:
        steps = json.loads((out / "config.json").read_text())["steps"]
        return steps, [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    except (OSError, KeyError, json.JSONDecodeError):
        return None


def finished(out: Path) -> bool:
    """The run's last evaluation (at its last step) is in its metrics."""
    read = _records(out)
    return read is not None and any(r.get("kind") == "eval" and r.get("step") == read[0] for r in read[1])


def progress(out: Path) -> str:
    read = _records(out)
    if read is None:
        return "not started"
    if finished(out):
        return "finished"
    trained = [r for r in read[1] if r.get("kind") == "train"]
    return f"step {trained[-1]['step']}/{read[0]}" if trained else "starting"


# `seqdsl eval` exits 2 on a user error: a model that cannot be evaluated at that length says so
# (random keys have parameters per position), which is an answer, not a failure to retry
ANSWERED = (0, 2)


def execute(run: Run, gpu: int, args: argparse.Namespace, say) -> None:
    runs, data = args.runs.resolve(), args.data.resolve()
    out = runs / run.name
    meta_path = out / "study.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"run": run.name, "attempts": []}
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), "PYTHONUNBUFFERED": "1"}
    if not finished(out):
        resume = (out / "checkpoints").is_dir() and any((out / "checkpoints").iterdir())
        cmd = train_command(run, data, out, resume, tuple(args.extra), args.tokenizer)
        out.mkdir(parents=True, exist_ok=True)
        say(f"gpu {gpu}: {run.name} {'resumed' if resume else 'started'}")
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        rc, seconds = timed(cmd, env, out / "train.log")
        meta["attempts"].append({"command": shlex.join(cmd), "gpu": gpu_name(gpu), "started": started,
                                 "wall_s": round(seconds, 1), "rc": rc})
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")
        say(f"gpu {gpu}: {run.name} trained rc={rc} in {seconds:.0f} s")
        if rc != 0:
            return
    seq_len = json.loads((out / "config.json").read_text())["seq_len"]
    lengths = meta.setdefault("lengths", {})
    for factor in LENGTHS:
        length = seq_len * factor
        if str(length) in lengths and lengths[str(length)]["rc"] in ANSWERED:
            continue
        cmd = eval_command(out, length)
        rc, seconds = timed(cmd, env, out / "train.log")
        lengths[str(length)] = {"command": shlex.join(cmd), "wall_s": round(seconds, 1), "rc": rc}
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")
        say(f"gpu {gpu}: {run.name} evaluated at {length} rc={rc} in {seconds:.0f} s")


def run_study(args: argparse.Namespace) -> int:
    runs = args.runs.resolve()
    todo: queue.Queue[Run] = queue.Queue()
    for run in select(args.only):
        if finished(args.records / run.name):
            continue  # its records are in the repository already: a later session does not rerun it
        if not (finished(runs / run.name) and lengths_done(runs / run.name)):
            todo.put(run)
    say = sayer()
    say(f"{todo.qsize()} runs to do on {args.gpus} GPU(s)")
    pool(todo, list(range(args.gpus)), lambda run, gpu: execute(run, gpu, args, say), until=args.until, say=say)
    say("study done" if todo.empty() else f"{todo.qsize()} runs left for a later call")
    return 0


def lengths_done(out: Path) -> bool:
    try:
        lengths = json.loads((out / "study.json").read_text()).get("lengths", {})
    except (OSError, json.JSONDecodeError):
        return False
    return len(lengths) == len(LENGTHS) and all(m["rc"] in ANSWERED for m in lengths.values())


def select(only: list[str] | None) -> list[Run]:
    if not only:
        return list(STUDY)
    chosen = [r for r in STUDY if r.name in only or r.spec in only]
    unknown = set(only) - {r.name for r in chosen} - {r.spec for r in chosen}
    if unknown:
        sys.exit(f"error: not in the study: {', '.join(sorted(unknown))} (see `python experiments/study.py plan`)")
    return chosen


def pending_settings(records: Path = RECORDS) -> list[str]:
    """The settings, in study order, of the runs whose records are not in the repository yet."""
    return list(dict.fromkeys(r.setting for r in STUDY if not finished(records / r.name)))


def prepare(args: argparse.Namespace) -> int:
    """`seqdsl data prepare` for a setting's recipe (or those of every setting with runs left to
    do): the token cache built before the GPUs start."""
    settings = pending_settings() if args.setting == "pending" else [args.setting]
    for setting in settings:
        cmd = ["seqdsl", "data", "prepare", "--config", RECIPES[setting], "--quiet",
               *data_overrides(args.data.resolve(), args.tokenizer)]
        print(f"$ {shlex.join(cmd)}", flush=True)
        rc = subprocess.run([sys.executable, "-m", "seqdsl.cli.main", *cmd[1:]], cwd=REPO).returncode
        if rc != 0:
            return rc
    if not settings:
        print("every run of the study has its records: nothing to prepare")
    return 0


def plan(args: argparse.Namespace) -> int:
    data, runs = Path("DATA"), Path("RUNS")
    for i, run in enumerate(select(args.only), 1):
        print(f"{i:2d}. {run.name}\n    {shlex.join(train_command(run, data, runs / run.name, False))}")
    return 0


def status(args: argparse.Namespace) -> int:
    for run in select(args.only):
        out = args.runs / run.name
        print(f"{run.name:38s} {progress(out):16s} {'lengths done' if lengths_done(out) else ''}")
    return 0


def collect(args: argparse.Namespace) -> int:
    """Copy the records of finished runs into the repository (checkpoints stay behind)."""
    copied = 0
    for run in select(args.only):
        src = args.runs / run.name
        if not finished(src):
            continue
        dest = args.dest / run.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in (*RECORD_FILES, *(f.name for f in src.glob("eval_seq*.json"))):
            if (src / name).exists():
                shutil.copy2(src / name, dest / name)
        copied += 1
    print(f"{copied} finished runs copied to {args.dest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("plan", "prepare", "run", "status", "collect"):
        p = sub.add_parser(name)
        if name != "prepare":
            p.add_argument("--only", nargs="+", metavar="RUN", help="run names or spec names (default: the whole study)")
        if name in ("run", "status", "collect"):
            p.add_argument("--runs", type=Path, required=True, help="the folder of run directories")
        if name in ("run", "prepare"):
            p.add_argument("--data", type=Path, required=True, help="domain folders and tokenizers/")
            p.add_argument("--tokenizer", help="a tokenizer.json or `bytes` (default: DATA/tokenizers/gpt-neox-20b/tokenizer.json)")
    sub.choices["prepare"].add_argument("--setting", choices=(*RECIPES, "pending"), default="limited",
                                        help="a recipe's setting, or `pending`: every setting with runs left to do")
    sub.choices["run"].add_argument("--gpus", type=int, default=1, help="trainings at once, one per GPU")
    sub.choices["run"].add_argument("--records", type=Path, default=RECORDS,
                                    help="runs whose records are here are done (default: docs/results/runs)")
    sub.choices["run"].add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                                    help="arguments appended to every `seqdsl train` (a CPU dry run: --preset tiny ...)")
    sub.choices["run"].add_argument("--until", type=float, help="start no run after this time (seconds since the epoch)")
    sub.choices["collect"].add_argument("--dest", type=Path, default=RECORDS)
    args = parser.parse_args(argv)
    commands = {"plan": plan, "prepare": prepare, "run": run_study, "status": status, "collect": collect}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
