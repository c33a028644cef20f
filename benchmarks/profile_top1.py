"""Where the time of a Top-1 training step goes: a torch.profiler breakdown of forward+backward
for each generated kernel and cuDNN SDPA, per GPU kernel and per torch op around our kernels.

    python benchmarks/profile_top1.py [--lengths 8192,32768] [--dims 64,128] [--tokens 131072]
                                      [--steps 3] [--out benchmarks/results]
    python benchmarks/profile_top1.py --smoke   # tiny shapes on CPU under TRITON_INTERPRET=1

Shape legend: B batch, T length, H heads (H * D = 768), D head dim; B * T = --tokens for every T,
as in benchmarks/bench_top1.py. Inputs (B, T, H, D) bf16 on CUDA (float32 on CPU).

Per case (kernel, T, D), after two warm-up steps (compile), `--steps` profiled steps of
`out = f(q, k, v); out.backward(dO)`:
  - step ms: median of unprofiled steps (CUDA events), and peak memory over the inputs (MiB);
  - GPU kernels: name, calls per step, ms per step, share of the step; each kernel is also put in
    a group (ours = the generated Triton kernels, sdpa = cuDNN / flash, torch: copy/cast,
    torch: fill/zeros, torch: sort/index/scatter, torch: elementwise/reduce, other);
  - idle: the profiled steps' span on the GPU minus the union of kernel intervals (launch gaps,
    host work the GPU waits for);
  - torch ops (aten) with GPU time of their own, or that allocate: calls, self GPU ms, CPU ms per
    step: the non-kernel work around our kernels (allocations, zeros/fills, casts, index ops).
On the CPU (--smoke) the interpreter's kernels are Python, not CUDA kernels: only the torch-op
table has rows; the mode exists to exercise the code path.
Prints one table per case and writes profile_top1_<device>_<date>.{json,md} under --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# kernel-name patterns -> group, first match wins (names as CUDA reports them)
GROUPS = (
    ("ours", re.compile(r"^top\d+_")),
    ("sdpa", re.compile(r"cudnn|flash|fmha|sm\d+_xmma|attention", re.I)),
    ("torch: copy/cast", re.compile(r"copy|convert|cast|Memcpy", re.I)),
    ("torch: fill/zeros", re.compile(r"fill|Memset|zero", re.I)),
    ("torch: sort/index/scatter", re.compile(r"sort|radix|scan|index|scatter|gather|search|cub", re.I)),
    ("torch: elementwise/reduce", re.compile(r"elementwise|reduce|vectorized|unrolled", re.I)),
)
# aten ops listed even without GPU time of their own: they allocate
ALLOCATING = ("aten::empty", "aten::empty_strided", "aten::zeros", "aten::full", "aten::empty_like",
              "aten::zeros_like", "aten::new_empty", "aten::new_zeros")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", default="8192,32768")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--tokens", type=int, default=131072)
    p.add_argument("--chunk", type=int, default=128)
    p.add_argument("--steps", type=int, default=3, help="profiled steps per case")
    p.add_argument("--kernels", default="sdpa_cudnn,top1_element,top1_chunk_exact,top1_chunk_approx",
                   help="also topk:CASE for a case of benchmarks/bench_topk.py (e.g. topk:moba_k3_c512, "
                        "topk:element_k64, topk:nsa_shared_k16_c64; grad = none, its own k and chunk)")
    p.add_argument("--nsa-heads", default="16:1", help="HQ:HKV of the GQA top-k cases (bench_topk.py's)")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on CPU under the interpreter")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    return p.parse_args(argv)


def group_of(name: str) -> str:
    for group, pattern in GROUPS:
        if pattern.search(name):
            return group
    return "other"


def _attr(evt, *names, default=0.0):
    for name in names:  # torch renamed cuda_* to device_* (2.4); take whichever exists
        if hasattr(evt, name):
            return getattr(evt, name)
    return default


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def breakdown(prof, steps: int, step_ms: float) -> dict:
    """The profile of `steps` steps as per-step tables (module docstring)."""
    import torch

    cuda = torch.autograd.DeviceType.CUDA
    kernels: dict[str, dict] = {}
    intervals = []
    for evt in prof.events():
        if evt.device_type != cuda:
            continue
        start, end = evt.time_range.start, evt.time_range.end
        intervals.append((start, end))
        row = kernels.setdefault(evt.name, dict(name=evt.name, group=group_of(evt.name), calls=0, us=0.0))
        row["calls"] += 1
        row["us"] += end - start
    busy_us = _union_us(intervals)
    span_us = (max(e for _, e in intervals) - min(s for s, _ in intervals)) if intervals else 0.0
    kernel_rows = []
    for row in sorted(kernels.values(), key=lambda r: -r["us"]):
        ms = row["us"] / 1e3 / steps
        kernel_rows.append(dict(name=row["name"], group=row["group"], calls=row["calls"] / steps, ms=ms,
                                share=ms / step_ms if step_ms > 0 else float("nan")))
    groups: dict[str, float] = {}
    for row in kernel_rows:
        groups[row["group"]] = groups.get(row["group"], 0.0) + row["ms"]
    ops = []
    for avg in prof.key_averages():
        if not avg.key.startswith("aten::"):
            continue
        gpu_us = _attr(avg, "self_device_time_total", "self_cuda_time_total")
        if gpu_us <= 0 and avg.key not in ALLOCATING:
            continue
        ops.append(dict(op=avg.key, calls=avg.count / steps, gpu_ms=gpu_us / 1e3 / steps,
                        cpu_ms=avg.self_cpu_time_total / 1e3 / steps))
    ops.sort(key=lambda r: (-r["gpu_ms"], -r["calls"]))
    return dict(step_ms=step_ms, kernel_ms=sum(r["ms"] for r in kernel_rows), busy_ms=busy_us / 1e3 / steps,
                idle_ms=(span_us - busy_us) / 1e3 / steps, groups=groups, kernels=kernel_rows, ops=ops)


def runners(names, dim: int, chunk: int, scale: float, heads: int, nsa_heads: tuple[int, int]):
    """name -> (f(q, k, v) -> o differentiable, None or the (HQ, HKV) heads of a GQA case's
    inputs); (B, T, H, D) in and out, k and v with HKV heads for a GQA case."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from benchmarks.bench_top1 import keys
    from seqdsl.kernels import top1

    out = {}
    kernel_keys = keys(dim, chunk)
    for name in names:
        if name.startswith("topk:"):
            from benchmarks.bench_topk import CASES, generated_key

            case = CASES[name[5:]]
            hq, hkv = nsa_heads if case.gqa else (heads, heads)
            out[name] = top1.bind(generated_key(case, dim, hq, hkv)), (nsa_heads if case.gqa else None)
            continue
        elif name == "sdpa_cudnn":
            def sdpa(q, k, v):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    o = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                                                       is_causal=True, scale=scale)
                return o.transpose(1, 2)
            out[name] = sdpa, None
        else:
            out[name] = top1.bind(kernel_keys[name]), None
    return out


def step_fn(fn, q, k, v, do):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]

    def step():
        fn(*leaves).backward(do)
        for t in leaves:
            t.grad = None
    return step


def profile_case(name, fn, q, k, v, do, device, steps: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.bench_top1 import bench, peak_mib

    step = step_fn(fn, q, k, v, do)
    for _ in range(2):  # compile and warm the caches
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    step_ms = bench(step, device)
    peak = peak_mib(step, device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    return dict(kernel=name, peak_mib=peak, **breakdown(prof, steps, step_ms))


def table(case: dict) -> str:
    head = (f"## {case['kernel']}  T={case['T']}  D={case['dim']}  (B={case['B']}, H={case['H']})\n\n"
            f"step {case['step_ms']:.2f} ms (unprofiled median); kernels {case['kernel_ms']:.2f} ms, "
            f"GPU busy {case['busy_ms']:.2f} ms, idle between kernels {case['idle_ms']:.2f} ms per step; "
            f"peak {case['peak_mib']:.0f} MiB over the inputs\n\n"
            "groups: " + ", ".join(f"{g} {ms:.2f} ms" for g, ms in sorted(case["groups"].items(), key=lambda x: -x[1]))
            + "\n\n| GPU kernel | group | calls/step | ms/step | share |\n|---|---|---|---|---|\n")
    rows = [f"| `{r['name'][:90]}` | {r['group']} | {r['calls']:.0f} | {r['ms']:.3f} | {r['share']:.1%} |"
            for r in case["kernels"]]
    ops = ["", "| torch op | calls/step | self GPU ms/step | CPU ms/step |", "|---|---|---|---|"]
    ops += [f"| {r['op']} | {r['calls']:.0f} | {r['gpu_ms']:.3f} | {r['cpu_ms']:.3f} |" for r in case["ops"]]
    return head + "\n".join(rows) + "\n" + "\n".join(ops) + "\n"


def write(out: Path, result: dict, smoke: bool) -> None:
    """JSON and markdown of the cases so far (rewritten after each case: a run cut short keeps them)."""
    out.mkdir(parents=True, exist_ok=True)
    model = re.search(r"\b([A-Z]+\d+)\b", result["device"])
    tag = "smoke" if smoke else (model.group(1) if model else "cuda").lower()
    stem = f"profile_top1_{tag}_{result['date'][:10]}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    md = [f"# Top-1 forward+backward profile: {result['device']}, {result['date']}", "",
          f"Tokens per batch {result['tokens']}; H * D = 768; chunk {result['chunk']}; "
          f"{result['steps']} profiled steps per case.", ""]
    md += [table(c) if "error" not in c else f"## {c['kernel']} T={c['T']} D={c['dim']}: {c['error']}\n"
           for c in result["cases"]]
    (out / f"{stem}.md").write_text("\n".join(md))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        args.lengths, args.dims, args.tokens, args.chunk, args.steps = "40", "16", 40, 16, 1
    os.environ.setdefault("SEQDSL_CACHE_DIR", tempfile.mkdtemp(prefix="seqdsl_kernels_"))
    import torch

    from benchmarks.bench_top1 import case_inputs

    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    names = [n for n in args.kernels.split(",") if device.type == "cuda" or not n.startswith("sdpa")]
    dev_name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (Triton interpreter)"
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    result = dict(device=dev_name, date=date, torch=torch.__version__, tokens=args.tokens, chunk=args.chunk,
                  steps=args.steps, cases=[])
    for T in (int(x) for x in args.lengths.split(",")):
        for dim in (int(x) for x in args.dims.split(",")):
            B, H, q, k, v, do = case_inputs(T, dim, args.tokens, device, dtype, smoke=args.smoke)
            nsa_heads = tuple(int(x) for x in args.nsa_heads.split(":"))
            for name, (fn, gqa) in runners(names, dim, args.chunk, dim ** -0.5, H, nsa_heads).items():
                inputs, heads = (q, k, v, do), H
                if gqa:  # HQ query heads on HKV key/value heads, B * T tokens as the others
                    gen = torch.Generator(device=device).manual_seed(0)
                    inputs = tuple(torch.randn(B, T, h, dim, device=device, dtype=dtype, generator=gen)
                                   for h in (gqa[0], gqa[1], gqa[1], gqa[0]))
                    heads = f"{gqa[0]}/{gqa[1]}"
                try:
                    case = dict(T=T, dim=dim, B=B, H=heads, **profile_case(name, fn, *inputs, device, args.steps))
                except Exception as err:  # OOM or a backend missing here: recorded, not hidden
                    case = dict(kernel=name, T=T, dim=dim, error=f"{type(err).__name__}: {err}"[:300])
                    print(f"## {name} T={T} D={dim}: {case['error']}\n", flush=True)
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                else:
                    print(table(case), flush=True)
                result["cases"].append(case)
                write(Path(args.out), result, args.smoke)
            del q, k, v, do
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return 0 if all("error" not in c for c in result["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
