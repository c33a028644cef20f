"""`seqdsl train` itself against its benchmark: the command a user runs, on real data, beside
benchmarks/bench_train.py's synthetic-token step of the same shape, measured in the same call.

    python benchmarks/bench_train_command.py --data DIR --tokenizer FILE.json \
        [--specs transformer,top1_chunk_approx] [--steps 40] [--batch 64 --micro-batch 16] \
        [--no-cuda-graphs] [--no-bench] [--cold-caches] [--out FILE.json]

For each spec: (1) `seqdsl train SPEC` in a fresh process on the folders of DIR (`--train-domain`
trained on, the others evaluated once at the end) for `--steps` optimizer steps; (2) then, in
this process (the command had the whole GPU), bench_train.bench_spec, the step of the same shape
on random tokens (compile, CUDA graphs, the same batch and micro batch). From the run's metrics.jsonl: the median tokens/s and data wait over
the steps after the first quarter (compilation and warm-up), the time to first step (the
`first_step` event: from the command's start, data, self-checks and compilation included) and the
paths per layer (`seqdsl lower`'s plan, as the run's log prints it). MFU is against the bf16
GEMM rate measured in this call. Prints a table and writes JSON (default
benchmarks/results/bench_train_command_<device>_<date>.json).

`--cold-caches` gives each `seqdsl train` empty caches of its own (Triton, inductor, the CUDA
driver's JIT, seqdsl's verdicts and token cache): every spec's time to first step as on a fresh
machine, where otherwise the specs after the first find the token cache and shared kernels built.

`--no-bench` runs only `seqdsl train` (for specs whose benchmark half compiles for minutes: the
stateful families); the table then gives each spec's ratio to Transformer++'s `seqdsl train` in
the same call, when transformer is among the specs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_train import bench_spec, spec_at  # noqa: E402
from seqdsl.eval.gemm import measure_gemm_rate  # noqa: E402
from seqdsl.ir.flops import mfu  # noqa: E402
from seqdsl.run.config import RunConfig  # noqa: E402
from seqdsl.run.device import pick_device  # noqa: E402
from seqdsl.train.throughput import training_flops_per_token  # noqa: E402


def _config(args, data_dirs: list[str], steps: int) -> str:
    files = ", ".join(json.dumps(d) for d in data_dirs)
    return f"""preset = "{args.preset}"
tokens = {steps * args.batch * args.seq}
batch = {args.batch}
micro_batch = {args.micro_batch}
seq_len = {args.seq}
lr = 3e-4
warmup = 10
eval_every = 0
checkpoint_every = 0
log_every = 5
compile = true
cuda_graphs = {str(args.cuda_graphs).lower()}
compile_scope = "{args.compile_scope}"
keep_absolute = {str(args.keep_absolute).lower()}

[data]
source = "files"
files = [{files}]
train_domains = ["{args.train_domain}"]
tokenizer = "{args.tokenizer}"
heldout = 0.01
eval_tokens = {args.eval_tokens}
"""


# --cold-caches: each run's own empty caches (Triton's kernels and autotuning, inductor's, the CUDA
# driver's JIT, seqdsl's verdicts and token cache)
COLD_CACHES = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "CUDA_CACHE_PATH": "cuda",
               "SEQDSL_CACHE_DIR": "seqdsl"}


def run_command(spec: str, args, workdir: Path) -> dict:
    """`seqdsl train` on the real data, in a fresh process; its figures from metrics.jsonl."""
    data_dirs = sorted(str(p) for p in Path(args.data).iterdir() if p.is_dir() and p.name != "tokenizers")
    name, n = spec, 1
    while (workdir / f"run_{name}").exists():  # a spec timed twice (or a rerun) gets a fresh run
        n += 1
        name = f"{spec}_{n}"
    config = workdir / f"{name}.toml"
    config.write_text(_config(args, data_dirs, args.steps))
    out = workdir / f"run_{name}"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.cold_caches:  # what a fresh machine has: no compiled kernels, autotuning, verdicts or token cache
        cold = workdir / f"caches_{name}"
        env.update({var: str(cold / sub) for var, sub in COLD_CACHES.items()})
    # --profile-startup: the command's main thread under cProfile (the data threads are not
    # profiled); it slows Python-heavy work (tracing, codegen), so read shares, not seconds
    profile = workdir / f"{name}.prof"
    python = [sys.executable, *(["-m", "cProfile", "-o", str(profile)] if args.profile_startup else [])]
    t0 = time.perf_counter()
    proc = subprocess.run([*python, "-m", "seqdsl.cli.main", "train", str(ROOT / "specs" / f"{spec}.seq"),
                           "--config", str(config), "--out", str(out), "--quiet"],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    (workdir / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if args.profile_startup and profile.exists():
        _write_profile(profile, workdir / f"{name}_profile.txt")
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["?"]
        # the last line says what; the lines before it (a traceback for a crash) say where
        return {"error": f"seqdsl train exited {proc.returncode}: {lines[-1]}", "log_tail": lines[-40:]}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    steady = train[len(train) // 4:]
    step_s = [args.batch * args.seq / r["tokens_per_s"] for r in steady]
    first = next(r for r in rows if r.get("event") == "first_step")
    paths = next((r["detail"] for r in rows if r.get("event") == "paths"), "")
    heldout = next((r for r in rows if r.get("event") == "heldout"), {})  # read beside the first step
    config_json = json.loads((out / "config.json").read_text())
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in steady),
            "first_step_detail": first["detail"], "selfcheck_s": first.get("selfcheck_seconds"), "paths": paths,
            "startup": first.get("startup"), "cold_caches": args.cold_caches,
            "heldout_s": heldout.get("seconds"), "heldout_wait_s": heldout.get("wait_s"),
            "data_wait_fraction": statistics.median(r["data_wait_s"] / s for r, s in zip(steady, step_s)),
            "data_wait_s_max": max(r["data_wait_s"] for r in steady),
            "time_to_first_step_s": first["seconds"], "wall_s": wall, "steps": len(train),
            "model": config_json["model_name"], "final_loss": train[-1]["loss"],
            "evals": {r["domain"]: r["loss"] for r in rows if r["kind"] == "eval"}}


def _write_profile(profile: Path, text: Path, top: int = 60) -> None:
    """The profile's functions by cumulative time, the `top` first, as pstats prints them."""
    import io
    import pstats

    buffer = io.StringIO()
    pstats.Stats(str(profile), stream=buffer).sort_stats("cumulative").print_stats(top)
    text.write_text(buffer.getvalue())


def _startup(train: dict) -> str:
    """The first_step event's split (seqdsl/train/run.py), as `model/paths/data (wait)/step s; `."""
    t = train.get("startup")
    if not t:
        return ""
    return (f"start model {t['model']:.1f}, paths {t['plan']:.1f}, data {t['data']:.1f} (waited {t['data_wait']:.1f}), "
            f"step {t['first_step']:.1f} s; "
            + (f"held-out {train['heldout_s']:.1f} s beside it (waited {train['heldout_wait_s']:.1f}); "
               if train.get("heldout_s") is not None else ""))


def _flops_per_token(spec: str, args) -> float:
    """The training FLOPs per token of SPEC at the run's shape (what bench_spec reports)."""
    return training_flops_per_token(*spec_at(spec, args.preset, args.seq, args.keep_absolute), args.seq)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a folder of domain folders (shards), e.g. a link to the corpus")
    p.add_argument("--tokenizer", required=True, help="a tokenizer.json (GPT-NeoX-20B's)")
    p.add_argument("--train-domain", default="web_blogs")
    p.add_argument("--specs", default="transformer,top1_chunk_approx")
    p.add_argument("--preset", default="110m")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--keep-absolute", action="store_true",
                   help="windows and chunks keep their size in tokens at --seq (seqdsl train's keep_absolute)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--bench-steps", type=int, default=10)
    p.add_argument("--eval-tokens", type=int, default=65_536)
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--compile-scope", choices=("block", "model"), default="block",
                   help="how the model body is compiled (RunConfig.compile_scope), for both halves")
    p.add_argument("--workdir", default="/tmp/bench_train_command")
    p.add_argument("--no-bench", dest="bench", action="store_false",
                   help="only `seqdsl train`; ratios against transformer's run in this call")
    p.add_argument("--cold-caches", action="store_true",
                   help="each `seqdsl train` with empty caches of its own (time to first step as on a fresh machine)")
    p.add_argument("--profile-startup", action="store_true",
                   help="run each command's main thread under cProfile; WORKDIR/<spec>_profile.txt lists "
                        "its functions by cumulative time (where the time to the first step goes)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = RunConfig().tf32  # the benchmark half as `seqdsl train` runs
    device = pick_device("auto")
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    gemm = measure_gemm_rate(device) if device.type == "cuda" else None
    date = datetime.date.today().isoformat()
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        f"bench_train_command_{device_name.replace(' ', '_').lower()}_{date}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"device {device_name}; {args.preset}, seq {args.seq}, batch {args.batch} = {args.micro_batch} x "
          f"{args.batch // args.micro_batch}, compile ({args.compile_scope}), CUDA graphs {args.cuda_graphs}; bf16 GEMM "
          f"{gemm / 1e12:.0f} TFLOP/s" if gemm else f"device {device_name}", flush=True)
    print(f"{'spec':<20} {'bench tok/s':>12} {'train tok/s':>12} {'ratio':>6} {'MFU':>6} {'wait':>6} "
          f"{'1st step s':>10}", flush=True)
    rows = []
    for spec in args.specs.split(","):
        row: dict = {"spec": spec}
        try:
            # the command first, in its own process, then the benchmark step here: the benchmark's
            # compiled graphs keep their CUDA-graph memory pools for as long as this process lives,
            # and a command started after it had the GPU's memory less them (Gated DeltaNet ran
            # out of memory at micro batch 16 on an 80 GB H100, 2026-11-28)
            row["train"] = run_command(spec, args, workdir)
            if args.bench:
                row["bench"] = bench_spec(spec, args.preset, args.seq, args.batch, args.bench_steps, 3, device, True,
                                          args.cuda_graphs, micro_batch=args.micro_batch, scope=args.compile_scope,
                                          keep_absolute=args.keep_absolute)
                torch.cuda.empty_cache()
            else:
                row["flops_per_token"] = _flops_per_token(spec, args)
        except Exception as err:  # one failing spec must not hide the others' figures
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        train, bench = row.get("train", {}), row.get("bench", {})
        if "tokens_per_s" in train and (not args.bench or "tokens_per_s" in bench):
            if args.bench:  # against the benchmark step of the same spec
                row["ratio"] = train["tokens_per_s"] / bench["tokens_per_s"]
                flops, ratio, paths = bench["flops_per_token"], f"{row['ratio']:>6.2f}", ", ".join(bench["paths"])
            else:  # against Transformer++'s command in this call, when it ran
                base = next((r["train"]["tokens_per_s"] for r in [*rows, row]
                             if r["spec"] == "transformer" and "tokens_per_s" in r.get("train", {})), None)
                row["vs_transformer"] = train["tokens_per_s"] / base if base else None
                flops, ratio = row["flops_per_token"], f"{row['vs_transformer']:>5.2f}T" if base else f"{'':>6}"
                paths = f"self-checks {train['selfcheck_s'] or 0:.1f} s; {_startup(train)}{train['paths']}"
            row["mfu_vs_gemm"] = mfu(train["tokens_per_s"], flops, gemm) if gemm else None
            bench_tps = f"{bench['tokens_per_s']:>12,.0f}" if args.bench else f"{'-':>12}"
            print(f"{spec:<20} {bench_tps} {train['tokens_per_s']:>12,.0f} {ratio} "
                  f"{100 * (row['mfu_vs_gemm'] or 0):>5.1f}% {100 * train['data_wait_fraction']:>5.2f}% "
                  f"{train['time_to_first_step_s']:>10.1f}  {paths}", flush=True)
        else:
            print(f"{spec:<20} failed: {row.get('error') or train.get('error')}", flush=True)
        rows.append(row)
        out.write_text(json.dumps({"device": device_name, "date": date, "torch": torch.__version__,
                                   "gemm_bf16_flops": gemm, "args": vars(args), "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if all("ratio" in r or "vs_transformer" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
