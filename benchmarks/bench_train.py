"""Training throughput per spec family: tokens/s and MFU of full training steps, on this machine.

    python benchmarks/bench_train.py [--specs transformer,mamba2,...] [--preset 110m] [--seq 2048]
                                     [--batch 8] [--micro-batch M] [--steps 10] [--compile [--cuda-graphs]]
                                     [--reference-recurrent] [--no-tf32] [--out FILE.json]
    python benchmarks/bench_train.py --smoke      # tiny sizes, 2 steps, CPU: checks the script runs

One step = forward + backward + clipping + AdamW update of the whole language model at the
preset's size, bf16 autocast on CUDA (float32 on CPU): exactly the step `seqdsl train` runs, built
by the same code (seqdsl/train/step.py: the loss module, with --compile the compiled blocks and
loss head, the step and its one read of the device; seqdsl/train/optim.py: the optimizer, fused
AdamW on CUDA; `seqdsl train`'s default config). Tokens/s is the median over the timed steps after
`--warmup` steps (which include any compilation). `--reference-recurrent` puts the recurrent
mixers on their chunked PyTorch reference (`reference.chunked`), to measure it where a fast kernel
would be chosen; softmax layers (a hybrid's) keep their planned path. The bf16 GEMM rate (an
8192^3 matmul, `seqdsl.eval.gemm.measure_gemm_rate`) is measured in the same call, so MFU can be
read against both the datasheet peak and what this GPU really does.

MFU needs the FLOPs per token of each mixer (a sparse mixer must not be credited with dense
attention): they come from `seqdsl.ir.flops` through `seqdsl.train.throughput`. MFU is given
against the measured GEMM rate (`seqdsl.eval.gemm`) and the data-sheet peak.

Prints a table and writes the rows, device, versions and date as JSON (default
benchmarks/results/bench_train_<device>_<date>.json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import seqdsl  # noqa: E402
from seqdsl.eval.gemm import measure_gemm_rate  # noqa: E402
from seqdsl.ir.flops import mfu, peak_bf16_flops  # noqa: E402
from seqdsl.ir.presets import model_at  # noqa: E402
from seqdsl.lower.lm import LanguageModel  # noqa: E402
from seqdsl.lower.paths import set_path  # noqa: E402
from seqdsl.run.config import RunConfig  # noqa: E402
from seqdsl.run.device import autocast_dtype, pick_device  # noqa: E402
from seqdsl.train.optim import optimizer_for  # noqa: E402
from seqdsl.train.step import CausalLoss, apply_update, training_step  # noqa: E402
from seqdsl.train.throughput import training_flops_per_token  # noqa: E402

SPECS = ROOT / "specs"
FAMILIES = ("transformer,window_256,linear_attention,mamba2,gated_deltanet,rwkv7,top1_element,"
            "top1_chunk_exact,top1_chunk_approx")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def spec_at(name: str, preset: str, seq: int, keep_absolute: bool = False):
    """(program, model) of specs/<name>.seq resized to `preset` at the context `seq`, as `seqdsl
    train` resizes it (windows and chunks scaled with the context unless `keep_absolute`)."""
    resized = model_at(seqdsl.load(SPECS / f"{name}.seq").program, preset=preset, context=seq,
                       keep_absolute=keep_absolute)
    return resized.program, resized.model


def bench_spec(name: str, preset: str, seq: int, batch: int, steps: int, warmup: int, device: torch.device,
               compile_blocks: bool, cuda_graphs: bool = False, reference_recurrent: bool = False,
               micro_batch: int | None = None, scope: str = "block", keep_absolute: bool = False) -> dict:
    torch._dynamo.reset()  # each spec compiles afresh: guards of earlier specs' models must not count
    program, spec = spec_at(name, preset, seq, keep_absolute)
    torch.manual_seed(0)
    lm = LanguageModel(program, spec).to(device)
    if reference_recurrent:
        for block in lm.blocks:
            if block.mixer.key.family == "recurrent":
                set_path(block, "reference.chunked")
    # seqdsl train's defaults: optimizer, clip, precision
    config = RunConfig(compile=compile_blocks, cuda_graphs=cuda_graphs, compile_scope=scope)
    amp = autocast_dtype(config.dtype, device)
    if config.compile:
        lm.plan_paths(device, amp)  # self-checks and path logs run eagerly, outside the traced graphs
    loss_fn = CausalLoss(lm, compile=config.compile, cuda_graphs=config.cuda_graphs, scope=config.compile_scope)
    opt = optimizer_for(lm, config)
    x = torch.randint(0, spec.vocab, (batch, seq + 1), device=device)  # (B, T + 1)
    times, first = [], None
    for i in range(warmup + steps):
        _sync(device)
        t0 = time.perf_counter()
        stats = training_step(loss_fn, lm.parameters(), x, micro_batch or batch, autocast_dtype=amp,
                              clip=config.clip, keep_grads=cuda_graphs)
        loss, _ = stats.tolist()  # the one read per step seqdsl train makes (its non-finite check)
        apply_update(opt, keep_grads=cuda_graphs)
        _sync(device)
        dt = time.perf_counter() - t0
        if i == 0:
            first = dt
        if i >= warmup:
            times.append(dt)
    tokens_per_s = batch * seq / statistics.median(times)
    # the paths the steps took (after any self-check), not the static plan
    paths = sorted({plan.op for block in lm.blocks for kind, plan in block.mixer.paths.describe().items()
                    if kind == device.type})
    return {"spec": name, "model": spec.name, "params": lm.num_parameters(), "paths": paths,
            "tokens_per_s": tokens_per_s, "first_step_s": first, "loss": loss,
            "flops_per_token": training_flops_per_token(program, spec, seq)}


def _print_row(r: dict) -> None:
    if "error" in r:
        print(f"{r['spec']:<20} {'failed: ' + r['error']}", flush=True)
        return
    mfu = [f"{100 * r[k]:.1f}%" if r[k] is not None else "n/a" for k in ("mfu_vs_gemm", "mfu_vs_datasheet")]
    print(f"{r['spec']:<20} {r['tokens_per_s']:>12,.0f} {mfu[0]:>12} {mfu[1]:>13} {r['first_step_s']:>13.1f}  "
          f"{', '.join(r['paths'])}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", default=FAMILIES)
    p.add_argument("--preset", default="110m")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--keep-absolute", action="store_true",
                   help="windows and chunks keep their size in tokens at --seq (as seqdsl train --keep-absolute); "
                        "default: they scale with the context, as seqdsl train")
    p.add_argument("--micro-batch", type=int, default=None,
                   help="sequences per forward; the batch is then accumulated over batch / micro-batch of them")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="torch.compile the model body and the loss head, as seqdsl train")
    p.add_argument("--compile-scope", choices=("block", "model"), default="block",
                   help="how the body is compiled (RunConfig.compile_scope; default block, as seqdsl train)")
    p.add_argument("--cuda-graphs", action="store_true", help="with --compile: replay them as CUDA graphs")
    p.add_argument("--reference-recurrent", action="store_true",
                   help="recurrent mixers on their chunked PyTorch reference (default: the planner's choice)")
    p.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=RunConfig().tf32,
                   help="float32 matmuls on TF32 (the recurrent reference computes in float32 under bf16 "
                        "autocast); default: seqdsl train's (RunConfig.tf32)")
    p.add_argument("--device", default=None)
    p.add_argument("--smoke", action="store_true", help="tiny preset, seq 64, batch 2, 2 steps, on CPU")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.smoke:
        args.preset, args.seq, args.batch, args.steps, args.warmup = "tiny", 64, 2, 2, 1
        args.device = args.device or "cpu"
    device = pick_device(args.device or "auto")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    gemm = measure_gemm_rate(device) / 1e12 if device.type == "cuda" else None
    peak = peak_bf16_flops(device_name)
    date = datetime.date.today().isoformat()
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        f"bench_train_{'smoke_' if args.smoke else ''}{device_name.replace(' ', '_').lower()}_{date}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"device {device_name}; preset {args.preset}, seq {args.seq}, batch {args.batch} "
          f"(micro batch {args.micro_batch or args.batch}), "
          f"{'bf16 autocast' if device.type == 'cuda' else 'float32'}, compile {args.compile}, "
          f"CUDA graphs {args.cuda_graphs}, "
          f"recurrent path {'reference.chunked' if args.reference_recurrent else 'auto'}"
          f"{', TF32' if args.tf32 else ''}; "
          f"bf16 GEMM {f'{gemm:.0f} TFLOP/s' if gemm else 'n/a'}", flush=True)
    print(f"{'spec':<20} {'tokens/s':>12} {'MFU vs GEMM':>12} {'MFU vs sheet':>13} {'first step s':>13}  paths",
          flush=True)
    rows = []
    for name in args.specs.split(","):
        try:
            row = bench_spec(name, args.preset, args.seq, args.batch, args.steps, args.warmup, device, args.compile,
                             args.cuda_graphs, args.reference_recurrent, args.micro_batch, args.compile_scope,
                             args.keep_absolute)
        except Exception as err:  # one failing family must not hide the others' figures
            traceback.print_exc()
            row = {"spec": name, "error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"}
        fpt = row.get("flops_per_token")
        row["mfu_vs_gemm"] = mfu(row["tokens_per_s"], fpt, gemm * 1e12) if fpt and gemm else None
        row["mfu_vs_datasheet"] = mfu(row["tokens_per_s"], fpt, peak) if fpt and peak else None
        rows.append(row)
        _print_row(row)
        # written after every row: a run stopped at a time limit keeps what it measured
        out.write_text(json.dumps({"device": device_name, "date": date, "torch": torch.__version__,
                                   "preset": args.preset, "seq": args.seq, "keep_absolute": args.keep_absolute,
                                   "batch": args.batch,
                                   "micro_batch": args.micro_batch or args.batch,
                                   "steps": args.steps, "compile": args.compile, "cuda_graphs": args.cuda_graphs,
                                   "reference_recurrent": args.reference_recurrent, "tf32": args.tf32,
                                   "gemm_bf16_tflops": gemm,
                                   "datasheet_bf16_flops": peak, "rows": rows}, indent=2) + "\n")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"wrote {out}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
