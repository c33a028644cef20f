"""One GPU against several: the same `seqdsl train` run (same seed, data order and global batch)
on 1 process and under torchrun on N (DDP, FSDP2); loss curves compared, tokens/s of each.

    python benchmarks/bench_ddp.py                 # 2 GPUs: 1 GPU, DDP x 2, FSDP2 x 2
    python benchmarks/bench_ddp.py --gpus 4 --modes single,fsdp --steps 30
    python benchmarks/bench_ddp.py --smoke         # CPU, gloo, 2 processes, tiny: checks the script

Each mode is one real `seqdsl train` run (a subprocess; `torchrun --standalone` for N processes)
on the builtin corpus (no data files, no network; bytes, so the 110m preset has 85.2M parameters
with its 256-entry vocabulary), the Transformer++ spec at `--preset`, bf16 autocast on CUDA. The global batch B is split into micro batches of the same size M in every
mode (1 process: B / M accumulated micro batches; N processes: B / (M N) each), so every forward
has the same shape and only the order of the gradient sums (and, under FSDP2, bf16 parameters
in place of autocast's casts) differs. The curves are therefore equal within noise, not bitwise.

What is compared, per mode against the 1-process run:
- max |loss difference| over the steps, and that maximum over the step-to-step noise of the
  1-process curve, estimated on its second half (past the warm-up's bend) as std(second
  differences of the loss) / sqrt(6) (for a smooth trend plus independent noise of std s, second
  differences have std s sqrt(6)). A ratio well below 1 means the curves cannot be told apart
  by looking at them.
- tokens/s: the median of the trainer's own per-step figure (global tokens per step / step wall
  time, metrics.jsonl) over the steps after the first `--skip` (which include warm-up), and the
  speed-up over 1 process.
- checkpoints across layouts (mode `fsdp>single`, when fsdp runs): the FSDP2 run's checkpoint of
  the middle step (every run checkpoints there, so all share one config) resumed in 1 process;
  its curve is the FSDP2 one up to that step and must then follow the 1-process curve.

Prints a table and writes it as JSON and Markdown (default
benchmarks/results/bench_ddp_<device>_<date>.{json,md}); the run directories are kept under
--workdir for inspection.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from seqdsl.run.checkpoint import step_name  # noqa: E402

MODES = ("single", "ddp", "fsdp")


def noise_of(curve: list[float]) -> float:
    """The step-to-step noise of a loss curve: std of its second differences / sqrt(6)."""
    second = [curve[i + 1] - 2 * curve[i] + curve[i - 1] for i in range(1, len(curve) - 1)]
    return statistics.pstdev(second) / math.sqrt(6) if len(second) >= 2 else float("nan")


def compare(reference: list[float], other: list[float]) -> dict:
    """Max abs difference of two curves of the same steps, and that over the noise of the
    reference's second half."""
    if len(reference) != len(other):
        raise ValueError(f"curves of {len(reference)} and {len(other)} steps")
    diffs = [abs(a - b) for a, b in zip(reference, other)]
    noise = noise_of(reference[len(reference) // 2:])
    return {"max_abs_diff": max(diffs), "mean_abs_diff": statistics.fmean(diffs),
            "noise": noise, "max_diff_over_noise": max(diffs) / noise if noise > 0 else float("nan")}


def train_args(args: argparse.Namespace, mode: str, out: Path, resume: bool = False) -> list[str]:
    spec = ROOT / "specs" / f"{args.spec}.seq"
    train = ["train", str(spec), "--preset", args.preset, "--seq-len", str(args.seq),
             "--batch", str(args.batch), "--tokens", str(args.steps * args.batch * args.seq),
             "--lr", str(args.lr), "--seed", "0", "--device", args.device, "--quiet", "--out", str(out),
             "--set", f"micro_batch={args.micro_batch}", "--set", f"warmup={args.warmup}",
             "--set", "eval_every=0", "--set", f"checkpoint_every={max(1, args.steps // 2)}", "--set", "log_every=1000",
             "--set", f"data.eval_tokens={args.eval_tokens}"] + (["--resume"] if resume else [])
    if mode == "single":
        return [sys.executable, "-m", "seqdsl.cli.main", *train]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(args.gpus),
            "-m", "seqdsl.cli.main", *train, "--set", f"parallel={mode}"]


def run_mode(args: argparse.Namespace, mode: str, out: Path, rewound: Path | None = None) -> dict:
    """One run of `mode`; with `rewound`, a copy of that run directory stopped at its middle
    checkpoint, resumed (mode single only)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = train_args(args, mode, out, resume=rewound is not None)
    if rewound is not None:
        shutil.copytree(rewound, out)
        (out / "checkpoints" / "latest").write_text(step_name(max(1, args.steps // 2)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if args.device == "cpu":  # torchrun gives each process 1 thread; the 1-process run gets as many
        env.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-2000:]
        return {"mode": mode, "error": f"exit {proc.returncode}", "stderr_tail": tail, "wall_s": wall}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    config = json.loads((out / "config.json").read_text())
    speeds = [r["tokens_per_s"] for r in train[args.skip:]] or [r["tokens_per_s"] for r in train]
    processes, accumulation = config["processes"], config["accumulation"]  # config.json is the first run's
    if rewound is not None:
        speeds = [r["tokens_per_s"] for r in train[args.steps // 2:]]
        processes, accumulation = f"{processes} then 1", f"{accumulation} then {args.batch // args.micro_batch}"
        mode = f"{config['parallel']}>{mode}"
    return {"mode": mode, "processes": processes, "micro_batch": config["micro_batch"],
            "accumulation": accumulation, "dtype": config["dtype"], "steps": len(train),
            "losses": [r["loss"] for r in train], "tokens_per_s": statistics.median(speeds),
            "eval": {r["domain"]: r["loss"] for r in rows if r["kind"] == "eval"}, "wall_s": wall}


def table(rows: list[dict]) -> str:
    head = ("| mode | processes | micro x accum | tokens/s | speed-up | max abs loss diff | diff / noise "
            "| final loss | wall s |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    base = next((r for r in rows if r["mode"] == "single" and "error" not in r), None)
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['mode']} | failed: {r['error']} | | | | | | | {r['wall_s']:.0f} |")
            continue
        speed = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "n/a"
        diff = f"{r['max_abs_diff']:.2e}" if "max_abs_diff" in r else "(reference)"
        ratio = f"{r['max_diff_over_noise']:.3g}" if "max_diff_over_noise" in r else ""
        lines.append(f"| {r['mode']} | {r['processes']} | {r['micro_batch']} x {r['accumulation']} "
                     f"| {r['tokens_per_s']:,.0f} | {speed} | {diff} | {ratio} | {r['losses'][-1]:.4f} "
                     f"| {r['wall_s']:.0f} |")
    return "\n".join(lines)


def device_name(args: argparse.Namespace) -> str:
    if args.device == "cpu":
        return "cpu"
    import torch

    return f"{args.gpus}x {torch.cuda.get_device_name(0)}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default="transformer")
    p.add_argument("--preset", default="110m")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=32, help="global batch, sequences per optimizer step")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per forward, in every mode")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--eval-tokens", type=int, default=65_536)
    p.add_argument("--gpus", type=int, default=2, help="processes of the torchrun modes")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--skip", type=int, default=5, help="first steps left out of tokens/s (warm-up)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--timeout", type=float, default=600, help="seconds per mode")
    p.add_argument("--no-resume-check", action="store_true", help="skip the fsdp>single resume run")
    p.add_argument("--smoke", action="store_true", help="CPU, gloo, 2 processes, tiny preset, 8 steps")
    p.add_argument("--workdir", default=None, help="where the run directories go (default: a temp dir)")
    p.add_argument("--out", default=None, help="JSON result (a .md table is written beside it)")
    args = p.parse_args(argv)
    if args.smoke:
        args.preset, args.seq, args.batch, args.micro_batch, args.steps = "tiny", 32, 4, 1, 8
        args.warmup, args.skip, args.eval_tokens, args.gpus, args.device = 1, 1, 256, 2, "cpu"
    modes = [m for m in args.modes.split(",") if m]
    if "single" not in modes or any(m not in MODES for m in modes):
        p.error(f"--modes: a comma list of {', '.join(MODES)} that includes single (the reference)")
    if args.device != "cpu":
        import torch

        if torch.cuda.device_count() < args.gpus:
            print(f"needs {args.gpus} GPUs, this machine has {torch.cuda.device_count()}", file=sys.stderr)
            return 2
    if args.batch % (args.micro_batch * args.gpus):
        p.error(f"--batch {args.batch} must be a multiple of --micro-batch x --gpus")
    device = device_name(args)
    date = datetime.date.today().isoformat()
    slug = device.replace(" ", "_").lower()
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        f"bench_ddp_{'smoke_' if args.smoke else ''}{slug}_{date}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_ddp_"))
    print(f"device {device}; {args.spec} at {args.preset}, seq {args.seq}, global batch {args.batch} "
          f"(micro {args.micro_batch}), {args.steps} steps, lr {args.lr}; modes {', '.join(modes)}; "
          f"runs in {work}", flush=True)
    rows = []
    for mode in modes:
        print(f"running {mode} ...", flush=True)
        row = run_mode(args, mode, work / mode)
        if "error" in row:
            print(f"{mode} failed ({row['error']}):\n{row['stderr_tail']}", flush=True)
        else:
            print(f"{mode}: {row['steps']} steps, {row['tokens_per_s']:,.0f} tokens/s, final loss "
                  f"{row['losses'][-1]:.4f}, {row['wall_s']:.0f} s wall", flush=True)
        rows.append(row)
    if "fsdp" in modes and "error" not in rows[modes.index("fsdp")] and not args.no_resume_check:
        print("running fsdp>single (the FSDP2 run resumed in 1 process from its middle checkpoint) ...", flush=True)
        rows.append(run_mode(args, "single", work / "fsdp_then_single", rewound=work / "fsdp"))
        if "error" in rows[-1]:
            print(f"fsdp>single failed ({rows[-1]['error']}):\n{rows[-1]['stderr_tail']}", flush=True)
    reference = rows[modes.index("single")]
    for row in rows:
        if row is not reference and "error" not in row and "error" not in reference:
            row.update(compare(reference["losses"], row["losses"]))
    text = table(rows)
    print(text)
    meta = {"device": device, "date": date, "spec": args.spec, "preset": args.preset, "seq": args.seq,
            "batch": args.batch, "micro_batch": args.micro_batch, "steps": args.steps, "lr": args.lr,
            "gpus": args.gpus, "noise_definition": "std(second differences of the 1-process loss, second half) / sqrt(6)",
            "tokens_per_s_definition": f"median of the trainer's per-step tokens/s after step {args.skip}"}
    out.write_text(json.dumps(dict(meta, rows=rows), indent=2) + "\n")
    out.with_suffix(".md").write_text(f"# bench_ddp, {device}, {date}\n\n"
                                      + "".join(f"- {k}: {v}\n" for k, v in meta.items()) + "\n" + text + "\n")
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
