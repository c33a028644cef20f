"""Fast path vs reference, per spec: one mixer layer, forward + backward, on this machine.

    python benchmarks/bench_paths.py [--specs transformer,mamba2,...] [--batch 8] [--seq 2048]
                                     [--d-model 768] [--out results.json]

Prints a table (spec, path chosen, ms fast, ms reference, speedup, relative error of the fast
output against the reference) and writes the rows, the device and the date as JSON. Times are
medians over repeated runs with CUDA events after warm-up (host timers on CPU). Both paths run in
float32 on the same inputs in the same process, so the ratio is the figure to quote.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

import seqdsl
from seqdsl.lower.mixer import MixerModule
from seqdsl.lower.paths import set_path

SPECS = Path(__file__).resolve().parents[1] / "specs"
DEFAULT = ("transformer,window_256,alibi,top1_element,top1_chunk_exact,linear_attention,retnet,"
           "gla,mamba2,deltanet,gated_deltanet,rwkv6,rwkv7")


def _time(fn, device, budget_s: float = 3.0) -> float:
    """Median milliseconds of fn() (warm-up first; fewer repeats for slow paths)."""
    fn()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    once = time.perf_counter() - t0
    reps = max(1, min(20, int(budget_s / max(once, 1e-6))))
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench(name: str, batch: int, seq: int, d_model: int, device: torch.device) -> dict:
    program = seqdsl.load(SPECS / f"{name}.seq").program
    mixer = next(m for m in program.mixers if m.name in program.own) if any(
        m.name in program.own for m in program.mixers) else program.mixers[-1]
    torch.manual_seed(0)
    layer = MixerModule(mixer, d_model, context=seq).to(device)
    x = torch.randn(batch, seq, d_model, device=device, requires_grad=True)

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        y, _ = layer(x)
        y.float().square().mean().backward()
        return y

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast_out = step().detach()
    plan = layer.paths.describe().get(device.type)
    path, why = (plan.op, plan.reason) if plan else ("?", "?")
    fast_ms = _time(step, device)
    set_path(layer, "reference")
    ref_out = step().detach()
    ref_plan = layer.paths.describe().get(device.type)
    ref_path = ref_plan.op if ref_plan else "?"
    ref_ms = _time(step, device)
    err = ((fast_out - ref_out).norm() / ref_out.norm()).item()
    return {"spec": name, "path": path, "reason": why, "reference_path": ref_path,
            "fast_ms": fast_ms, "reference_ms": ref_ms, "speedup": ref_ms / fast_ms,
            "rel_err": err, "warnings": sorted({str(w.message) for w in caught})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specs", default=DEFAULT)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="bench_paths.json")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    meta = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "date": datetime.date.today().isoformat(), "torch": torch.__version__,
            "batch": args.batch, "seq": args.seq, "d_model": args.d_model, "dtype": "float32"}
    rows = []
    for name in args.specs.split(","):
        try:
            rows.append(bench(name, args.batch, args.seq, args.d_model, device))
        except Exception as err:  # one failing spec must not lose the others' numbers
            rows.append({"spec": name, "error": f"{type(err).__name__}: {err}"})
        r = rows[-1]
        done = r["error"] if "error" in r else f"{r['path']} {r['speedup']:.1f}x {' | '.join(r['warnings'])}"
        print(f"  {name}: {done}", file=sys.stderr, flush=True)
        # written after every spec, so an interrupted run keeps what it measured
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\n{meta['device']}, {meta['date']}, torch {meta['torch']}, B={args.batch} T={args.seq} "
          f"d_model={args.d_model}, float32, forward+backward of one mixer layer")
    print(f"{'spec':<20} {'path':<24} {'fast ms':>9} {'ref ms':>9} {'speedup':>8} {'rel err':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['spec']:<20} ERROR {r['error'][:80]}")
            continue
        print(f"{r['spec']:<20} {r['path']:<24} {r['fast_ms']:>9.2f} {r['reference_ms']:>9.2f} "
              f"{r['speedup']:>7.1f}x {r['rel_err']:>9.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
