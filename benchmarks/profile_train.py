"""Where a training step's time goes: the step as `seqdsl train` runs it, eager, compiled and
with CUDA graphs, and a kernel profile, on this GPU.

    python benchmarks/profile_train.py [--spec transformer] [--preset 110m] [--seq 2048] [--batch 8]
                                       [--variants eager,compiled,graphs] [--out FILE.json]
    python benchmarks/profile_train.py --smoke     # tiny, CPU: checks the script runs

Each variant times full training steps (forward, backward, clip, AdamW) of the same model and
batch through seqdsl/train/step.py, the code `seqdsl train` runs:

    eager          RunConfig() (fused AdamW on a GPU)
    compiled       compile = true: each Block and the cross-entropy compiled
    graphs         compile = true, cuda_graphs = true: the compiled pieces replayed as CUDA graphs

The last variant listed is then profiled (torch.profiler, CUDA activity) for `--profile-steps`
steps: the top kernels by GPU time, and the share of the step's wall time the GPU was busy (a
low share means the step waits on the CPU: launches, Python, syncs). Prints the tables and writes
them as JSON (default benchmarks/results/profile_train_<spec>_<device>_<date>.json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import seqdsl  # noqa: E402
from seqdsl.eval.gemm import measure_gemm_rate  # noqa: E402
from seqdsl.ir.presets import model_at  # noqa: E402
from seqdsl.lower.lm import LanguageModel  # noqa: E402
from seqdsl.run.config import RunConfig  # noqa: E402
from seqdsl.run.device import autocast_dtype  # noqa: E402
from seqdsl.train.optim import optimizer_for  # noqa: E402
from seqdsl.train.step import CausalLoss, apply_update, training_step  # noqa: E402
from seqdsl.train.throughput import training_flops_per_token  # noqa: E402

VARIANTS = {"eager": RunConfig(), "compiled": RunConfig(compile=True),
            "graphs": RunConfig(compile=True, cuda_graphs=True)}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_variant(args, device: torch.device, variant: str) -> tuple[dict, object]:
    config = VARIANTS[variant]
    resized = model_at(seqdsl.load(ROOT / "specs" / f"{args.spec}.seq").program, preset=args.preset)
    program, spec = resized.program, resized.model.model_copy(update={"context": args.seq})
    torch.manual_seed(0)
    lm = LanguageModel(program, spec).to(device)
    amp = autocast_dtype(config.dtype, device)
    if config.compile:
        lm.plan_paths(device, amp)  # as seqdsl train does: planning cannot be traced
    loss_fn = CausalLoss(lm, compile=config.compile, cuda_graphs=config.cuda_graphs, scope=config.compile_scope)
    opt = optimizer_for(lm, config)

    def step(x):
        stats = training_step(loss_fn, lm.parameters(), x, x.shape[0], autocast_dtype=amp, clip=config.clip)
        apply_update(opt)
        return stats

    x = torch.randint(0, spec.vocab, (args.batch, args.seq + 1), device=device)  # (B, T + 1)
    times, first = [], None
    for i in range(args.warmup + args.steps):
        _sync(device)
        t0 = time.perf_counter()
        loss, _ = step(x).tolist()  # the one read per step seqdsl train makes
        _sync(device)
        dt = time.perf_counter() - t0
        first = dt if i == 0 else first
        if i >= args.warmup:
            times.append(dt)
    tps = args.batch * args.seq / statistics.median(times)
    row = {"variant": variant, "tokens_per_s": tps, "step_ms": 1e3 * statistics.median(times),
           "first_step_s": first, "loss": loss, "params": lm.num_parameters(),
           "flops_per_token": training_flops_per_token(program, spec, args.seq)}
    return row, (step, x)


def profile(device: torch.device, step, x, steps: int, top: int) -> dict:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    _sync(device)
    t0 = time.perf_counter()
    with torch_profile(activities=acts) as prof:
        for _ in range(steps):
            step(x).tolist()
        _sync(device)
    wall_us = (time.perf_counter() - t0) * 1e6
    kernels = {}
    for ev in prof.events():
        if device.type == "cuda" and ev.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(ev.name, [0, 0.0])
            k[0] += 1
            k[1] += ev.device_time
    busy = sum(v[1] for v in kernels.values())
    rows = sorted(({"kernel": n, "calls": c // steps, "ms_per_step": t / steps / 1e3, "share": t / busy if busy else 0}
                   for n, (c, t) in kernels.items()), key=lambda r: -r["ms_per_step"])
    return {"wall_ms_per_step": wall_us / steps / 1e3, "gpu_busy_ms_per_step": busy / steps / 1e3,
            "gpu_busy_share": busy / wall_us if wall_us else None, "kernels": rows[:top],
            "kernel_count_per_step": sum(v[0] for v in kernels.values()) / steps}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default="transformer")
    p.add_argument("--preset", default="110m")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--smoke", action="store_true", help="tiny preset, seq 64, batch 2, eager and blocks, CPU")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = RunConfig().tf32  # as `seqdsl train` runs
    if args.smoke:
        args.preset, args.seq, args.batch, args.steps, args.warmup = "tiny", 64, 2, 2, 1
        args.variants, args.profile_steps = "eager", 1
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    gemm = measure_gemm_rate(device) if device.type == "cuda" else None
    date = datetime.date.today().isoformat()
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        f"profile_train_{'smoke_' if args.smoke else ''}{args.spec}_{name.replace(' ', '_').lower()}_{date}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"device {name}; {args.spec} at {args.preset}, seq {args.seq}, batch {args.batch}; bf16 GEMM "
          f"{f'{gemm / 1e12:.0f} TFLOP/s' if gemm else 'n/a'}", flush=True)
    print(f"{'variant':<14} {'tokens/s':>10} {'step ms':>9} {'MFU vs GEMM':>12} {'first step s':>13}", flush=True)
    rows, last = [], None
    for variant in args.variants.split(","):
        row, last = time_variant(args, device, variant)
        row["mfu_vs_gemm"] = row["flops_per_token"] * row["tokens_per_s"] / gemm if gemm else None
        rows.append(row)
        mfu = f"{100 * row['mfu_vs_gemm']:.1f}%" if row["mfu_vs_gemm"] else "n/a"
        print(f"{variant:<14} {row['tokens_per_s']:>10,.0f} {row['step_ms']:>9.1f} {mfu:>12} "
              f"{row['first_step_s']:>13.1f}", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    prof = profile(device, *last, args.profile_steps, args.top)
    print(f"\nprofile of `{rows[-1]['variant']}`: wall {prof['wall_ms_per_step']:.1f} ms/step, GPU busy "
          f"{prof['gpu_busy_ms_per_step']:.1f} ms/step"
          + (f" ({100 * prof['gpu_busy_share']:.0f}%)" if prof["gpu_busy_share"] else "")
          + f", {prof['kernel_count_per_step']:.0f} kernels/step")
    print(f"{'ms/step':>8} {'share':>6} {'calls':>6}  kernel")
    for k in prof["kernels"]:
        print(f"{k['ms_per_step']:>8.2f} {100 * k['share']:>5.1f}% {k['calls']:>6}  {k['kernel'][:110]}")
    out.write_text(json.dumps({"device": name, "date": date, "torch": torch.__version__, "spec": args.spec,
                               "preset": args.preset, "seq": args.seq, "batch": args.batch,
                               "gemm_bf16_flops": gemm, "rows": rows, "profile": prof}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
