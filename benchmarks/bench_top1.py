"""Top-1 kernels vs SDPA (cuDNN, flash) and FlexAttention (dense causal; the same Top-1 chunk
selection as a block mask, building the mask counted): time, useful TFLOP/s, peak memory.

    python benchmarks/bench_top1.py [--lengths 2048,8192,32768,65536,131072] [--dims 64,128]
                                    [--tokens 131072] [--check] [--out benchmarks/results]
    python benchmarks/bench_top1.py --smoke     # tiny shapes on CPU under TRITON_INTERPRET=1

Shape legend: B batch, T length, H heads (H * D = 768, the 110m preset's width), D head dim;
B * T = --tokens for every T (tokens per batch fixed). Inputs (B, T, H, D) bf16 on CUDA.

Rows: kernel, T, D, forward ms, forward+backward ms, useful TFLOP/s (FLOPs the algorithm needs,
per kernel, below) and its fraction of the bf16 GEMM rate measured in the same run, peak memory
over the inputs (MiB), speedups against the fastest SDPA backend, first-call time of our kernels
(render + Triton compile, fresh caches). --check first compares outputs and every gradient with
the float64 reference at T = 2125 (float32 and bf16 inputs). Writes JSON and a markdown table.

Useful FLOPs per (batch, head), n = T^2 / 2 causal pairs, C chunk, D = Dk = Dv:
    sdpa / flex dense       forward 4 n D, backward 2.5x forward (flash-attention's convention)
    top1 element            inference forward 2 n D (QK^T and a max); training forward 4 n D;
                            backward 6 n D (ste hard: dk kernel 3 GEMMs, dq kernel 3 GEMMs)
    top1 chunk exact        selection 2 n D (training: + 2 n D, the gate's dq direction GW kept by
                            the scan); attention 4 T (1.5 C) D; STE backward: gate dk 2 GEMMs over
                            the candidates (4 n D) + attention 2.5x
    top1 chunk approx       selection 2 n D / C; attention as exact; STE backward 4 n D / C + 2.5x
    flex top1 selection     as sdpa over the attended pairs: 4 T (1.5 C) D forward
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kernel_bench import compiled_flex, results_stem, write_results  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", default="2048,8192,32768,65536,131072")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--tokens", type=int, default=131072)
    p.add_argument("--chunk", type=int, default=128)
    p.add_argument("--flex-max-t", type=int, default=32768, help="longest T FlexAttention runs at")
    p.add_argument("--check", action="store_true", help="correctness against float64 (after the timings)")
    p.add_argument("--check-dtypes", default="float32,bfloat16", help="input dtypes the check runs")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on CPU under the interpreter")
    p.add_argument("--budget-s", type=float, default=480.0, help="skip what starts after this many seconds")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    return p.parse_args(argv)


def keys(dim: int, chunk: int):
    from tests.kernels.keys import variant

    return {
        "top1_element": variant("top1_element", dk=dim, dv=dim),
        "top1_chunk_exact": variant("top1_chunk_exact", dk=dim, dv=dim, chunk=chunk),
        "top1_chunk_approx": variant("top1_chunk_approx", dk=dim, dv=dim, chunk=chunk),
    }


def case_inputs(T: int, dim: int, tokens: int, device, dtype, *, smoke: bool = False):
    """(B, H, q, k, v, do) of one case: (B, T, H, dim) each, H * dim = 768 (2 heads when smoke),
    B * T = tokens, from a seeded generator on `device`."""
    import torch

    H = 2 if smoke else max(1, 768 // dim)
    B = max(1, tokens // T)
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v, do = (torch.randn(B, T, H, dim, device=device, dtype=dtype, generator=gen) for _ in range(4))
    return B, H, q, k, v, do


def useful_flops(kind: str, B: int, T: int, H: int, D: int, C: int) -> tuple[float, float]:
    """(forward, forward + backward) FLOPs the algorithm needs (module docstring)."""
    n = T * T / 2
    bh = B * H
    attn_sel = 4 * T * min(1.5 * C, T) * D  # selected chunk + half the local chunk on average
    if kind in ("sdpa_cudnn", "sdpa_flash", "flex_dense"):
        f = 4 * n * D
        return bh * f, bh * 3.5 * f
    if kind == "top1_element":
        return bh * 2 * n * D, bh * (4 * n * D + 6 * n * D)
    if kind == "top1_chunk_exact":
        return bh * (2 * n * D + attn_sel), bh * (4 * n * D + 4 * n * D + 3.5 * attn_sel)
    if kind == "top1_chunk_approx":
        return bh * (2 * n * D / C + attn_sel), bh * (6 * n * D / C + 3.5 * attn_sel)
    if kind == "flex_top1_approx":
        return bh * (2 * n * D / C + attn_sel), bh * (2 * n * D / C + 3.5 * attn_sel)
    raise ValueError(kind)


def bench(fn, device, reps_budget_s=1.0) -> float:
    """Median ms of fn() after warm-up (CUDA events; host timer on CPU)."""
    import torch

    fn()
    if device.type != "cuda":
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once = time.perf_counter() - t0
    reps = max(3, min(30, int(reps_budget_s / max(once, 1e-5))))
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def peak_mib(fn, device) -> float:
    import torch

    if device.type != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def gemm_tflops(device) -> float:
    """The bf16 GEMM rate (seqdsl.eval.gemm, as bench_train.py measures it), NaN on the CPU."""
    from seqdsl.eval.gemm import measure_gemm_rate

    return measure_gemm_rate(device) / 1e12 if device.type == "cuda" else float("nan")


def approx_selection_torch(q, k, C: int, scale: float):
    """The Approx selection for FlexAttention's block mask, in torch (B, H, T) int: a query's
    best earlier complete chunk by q . mean key, -1 for chunk-0 queries."""
    import torch

    B, T, H, D = q.shape
    full = T // C
    kbar = k[:, : full * C].float().view(B, full, C, H, D).mean(2)
    s = torch.einsum("bthd,bchd->bhtc", q.float(), kbar)
    cand = torch.arange(full, device=q.device)[None, :] < (torch.arange(T, device=q.device) // C)[:, None]
    s = s.masked_fill(~cand, float("-inf"))
    sel = s.argmax(-1)
    return torch.where(cand.any(-1), sel, -1).int()


def flex_runners(q, k, v, C: int, scale: float):
    from torch.nn.attention.flex_attention import create_block_mask

    B, T, H, D = q.shape
    compiled = compiled_flex()  # one for every shape and grad mode
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def causal(b, h, qi, kv):
        return kv <= qi

    dense_mask = create_block_mask(causal, None, None, T, T, device=q.device, _compile=True)

    def dense():
        return compiled(qt, kt, vt, block_mask=dense_mask, scale=scale)

    def selected():
        sel = approx_selection_torch(q, k, C, scale)

        def mask(b, h, qi, kv):
            return (kv <= qi) & ((kv // C == sel[b, h, qi]) | (kv // C == qi // C))

        block = create_block_mask(mask, B, H, T, T, device=q.device, _compile=True)
        return compiled(qt, kt, vt, block_mask=block, scale=scale)

    return {"flex_dense": dense, "flex_top1_approx": selected}


def run_check(dims, device, chunk: int, dtype_names: str = "float32,bfloat16") -> list[dict]:
    import torch

    from seqdsl.kernels import top1

    rows = []
    T = 2048 + 77 if device.type == "cuda" else 37
    C = chunk if device.type == "cuda" else 16
    dtypes = [getattr(torch, name) for name in dtype_names.split(",")] if device.type == "cuda" else [torch.float32]
    for dim in dims:
        for name, key in keys(dim, C).items():
            for dtype in dtypes:
                gen = torch.Generator().manual_seed(0)
                q, k, v, do = (torch.randn(1, T, 4, dim, generator=gen).to(device=device, dtype=dtype)
                               for _ in range(4))
                t0 = time.perf_counter()
                errors = top1.compare(key, q, k, v, do)
                tol = top1.TOLERANCE[dtype]
                rows.append(dict(kernel=name, dim=dim, dtype=str(dtype).replace("torch.", ""), T=T,
                                 ok=all(e <= tol for e in errors.values()), tol=tol,
                                 **{f"err_{k_}": e for k_, e in errors.items()}))
                print(f"check {name:18s} D={dim:3d} {rows[-1]['dtype']:8s} ok={rows[-1]['ok']} "
                      f"({time.perf_counter() - t0:.1f} s) "
                      + " ".join(f"{k_}={e:.1e}" for k_, e in errors.items()), flush=True)
    return rows


def measure(args, device, save=None) -> tuple[list[dict], dict]:
    """(rows, first-call compile seconds); `save(rows, compile_s)` after every row, so a run cut
    off by a time limit leaves what it measured on disk."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from seqdsl.kernels import top1

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    lengths = [int(x) for x in args.lengths.split(",")]
    dims = [int(x) for x in args.dims.split(",")]
    start = time.perf_counter()
    rows, compile_s = [], {}
    for T in lengths:  # short lengths first, both dims: a spent budget skips the longest
        for dim in dims:
            H = max(1, 768 // dim) if not args.smoke else 2
            kernels = {name: top1.bind(key) for name, key in keys(dim, args.chunk).items()}
            if time.perf_counter() - start > args.budget_s:
                print(f"budget spent: skipping D={dim} T={T}", flush=True)
                continue
            B = max(1, args.tokens // T)
            gen = torch.Generator(device=device).manual_seed(0)
            q, k, v = (torch.randn(B, T, H, dim, device=device, dtype=dtype, generator=gen) for _ in range(3))
            do = torch.randn(B, T, H, dim, device=device, dtype=dtype, generator=gen)
            scale = dim ** -0.5
            runners = {}
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            if device.type == "cuda":
                for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                                      ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
                    def sdpa(backend=backend):
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, scale=scale)
                    runners[name] = sdpa
                try:  # FlexAttention compiles per shape (tens of seconds): up to --flex-max-T
                    if T <= args.flex_max_t:
                        runners.update(flex_runners(q, k, v, args.chunk, scale))
                except Exception as err:  # FlexAttention unavailable here: say so in the rows
                    rows.append(dict(kernel="flex", T=T, dim=dim, error=f"{type(err).__name__}: {err}"[:200]))
            for name, kern in kernels.items():
                runners[name] = (lambda kern=kern: kern(q, k, v))
            for name, fn in runners.items():
                row = dict(kernel=name, T=T, dim=dim, B=B, H=H)
                try:
                    if name.startswith("top1") and (name, dim) not in compile_s:
                        t0 = time.perf_counter()
                        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                        kernels[name](*leaves).backward(do)
                        if device.type == "cuda":
                            torch.cuda.synchronize()
                        compile_s[(name, dim)] = time.perf_counter() - t0
                    with torch.no_grad():
                        row["fwd_ms"] = bench(fn, device)
                    leaves = [t.detach().requires_grad_() for t in (q, k, v)]

                    def train(fn=fn, name=name):
                        if name.startswith("top1"):
                            out = kernels[name](*leaves)
                        elif name.startswith("sdpa"):
                            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION if name == "sdpa_cudnn"
                                             else SDPBackend.FLASH_ATTENTION):
                                out = F.scaled_dot_product_attention(
                                    *(t.transpose(1, 2) for t in leaves), is_causal=True, scale=scale)
                        else:
                            out = _flex_train(name, leaves, args.chunk, scale)
                        out.backward(do if out.shape == do.shape else do.transpose(1, 2))
                        for t in leaves:
                            t.grad = None

                    row["fwdbwd_ms"] = bench(train, device)
                    row["peak_mib"] = peak_mib(train, device)
                    f, fb = useful_flops(name, B, T, H, dim, args.chunk)
                    row["fwd_tflops"] = f / row["fwd_ms"] / 1e9
                    row["fwdbwd_tflops"] = fb / row["fwdbwd_ms"] / 1e9
                except Exception as err:  # OOM or a backend missing here: recorded, not hidden
                    row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                rows.append(row)
                print(json.dumps(row), flush=True)
                if save:
                    save(rows, _named(compile_s))
            del q, k, v, do, runners
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows, _named(compile_s)


def _named(compile_s: dict) -> dict:
    return {f"{n}/D{d}": s for (n, d), s in compile_s.items()}


def _flex_train(name, leaves, C, scale):
    from torch.nn.attention.flex_attention import create_block_mask

    q, k, v = leaves
    B, T, H, D = q.shape
    compiled = compiled_flex()
    if name == "flex_dense":
        block = create_block_mask(lambda b, h, qi, kv: kv <= qi, None, None, T, T, device=q.device, _compile=True)
    else:
        sel = approx_selection_torch(q.detach(), k.detach(), C, scale)
        block = create_block_mask(lambda b, h, qi, kv: (kv <= qi) & ((kv // C == sel[b, h, qi]) | (kv // C == qi // C)),
                                  B, H, T, T, device=q.device, _compile=True)
    return compiled(*(t.transpose(1, 2) for t in leaves), block_mask=block, scale=scale)


def speedups(rows: list[dict]) -> None:
    """Add each row's ratio to the fastest SDPA backend of the same (T, D) (higher = faster)."""
    for row in rows:
        same = [r for r in rows if r.get("T") == row.get("T") and r.get("dim") == row.get("dim")
                and r["kernel"].startswith("sdpa") and "fwd_ms" in r]
        if not same or "fwd_ms" not in row:
            continue
        row["fwd_speedup_vs_sdpa"] = min(r["fwd_ms"] for r in same) / row["fwd_ms"]
        row["fwdbwd_speedup_vs_sdpa"] = min(r["fwdbwd_ms"] for r in same) / row["fwdbwd_ms"]
        row["peak_vs_sdpa"] = row["peak_mib"] / min(r["peak_mib"] for r in same)
        flex = [r for r in rows if r.get("T") == row.get("T") and r.get("dim") == row.get("dim")
                and r["kernel"] == "flex_top1_approx" and "fwd_ms" in r]
        if flex and row["kernel"] == "top1_chunk_approx":
            row["fwdbwd_speedup_vs_flex_selection"] = flex[0]["fwdbwd_ms"] / row["fwdbwd_ms"]


def markdown(result: dict) -> str:
    cut = " (cut off: the rows measured before the run stopped)" if result.get("partial") else ""
    lines = [f"# Top-1 kernels benchmark: {result['device']}, {result['date']}{cut}", "",
             (f"bf16 GEMM rate measured in this run: {result['gemm_tflops']:.0f} TFLOP/s. "
              if not math.isnan(result["gemm_tflops"]) else "bf16 GEMM rate: not recorded. ") +
             f"Tokens per batch: {result['tokens']}; H * D = 768; chunk {result['chunk']}.", "",
             "| kernel | T | D | fwd ms | fwd+bwd ms | fwd TFLOP/s (frac GEMM) | fwd+bwd TFLOP/s | peak MiB |"
             " fwd x SDPA | fwd+bwd x SDPA | peak / SDPA |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    g = result["gemm_tflops"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['kernel']} | {r.get('T')} | {r.get('dim')} | error: {r['error'][:80]} |")
            continue

        def f(x, fmt=".2f"):
            return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)
        frac = r["fwd_tflops"] / g if g == g and g else float("nan")
        lines.append(f"| {r['kernel']} | {r['T']} | {r['dim']} | {f(r['fwd_ms'])} | {f(r['fwdbwd_ms'])} | "
                     f"{f(r['fwd_tflops'], '.0f')} ({f(frac)}) | {f(r['fwdbwd_tflops'], '.0f')} | "
                     f"{f(r['peak_mib'], '.0f')} | {f(r.get('fwd_speedup_vs_sdpa'))} | "
                     f"{f(r.get('fwdbwd_speedup_vs_sdpa'))} | {f(r.get('peak_vs_sdpa'))} |")
    if result.get("compile_s"):
        lines += ["", "First call (render + compile, fresh caches, forward + backward): " +
                  ", ".join(f"{k} {v:.1f} s" for k, v in result["compile_s"].items())]
    if result.get("check"):
        lines += ["", "## Correctness against the float64 reference", "",
                  "| kernel | D | dtype | T | o | dq | dk | dv | ok |", "|---|---|---|---|---|---|---|---|---|"]
        for c in result["check"]:
            lines.append(f"| {c['kernel']} | {c['dim']} | {c['dtype']} | {c['T']} | {c['err_o']:.1e} | "
                         f"{c['err_dq']:.1e} | {c['err_dk']:.1e} | {c['err_dv']:.1e} | {c['ok']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        args.lengths, args.dims, args.tokens, args.chunk = "40", "16", 40, 16
    os.environ.setdefault("SEQDSL_CACHE_DIR", tempfile.mkdtemp(prefix="seqdsl_kernels_"))
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if device.type == "cuda":
        os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_"))  # first-call times
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (Triton interpreter)"
    gemm = gemm_tflops(device)
    import triton

    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = results_stem("bench_top1", name, "cuda", date, args.smoke)

    def save(rows, compile_s, check=(), partial=True) -> dict:
        rows = [dict(r) for r in rows]
        speedups(rows)
        result = dict(device=name, date=date, torch=torch.__version__, triton=triton.__version__,
                      gemm_tflops=gemm, tokens=args.tokens, chunk=args.chunk, rows=rows, compile_s=compile_s,
                      check=list(check), partial=partial)
        return write_results(out, stem, result, json.dumps(result, indent=1), markdown(result))

    rows, compile_s = measure(args, device, save)
    check = run_check([int(x) for x in args.dims.split(",")], device, args.chunk, args.check_dtypes) if args.check else []
    result = save(rows, compile_s, check, partial=False)
    print(markdown(result))
    return 0 if all(c["ok"] for c in check) else 1


if __name__ == "__main__":
    sys.exit(main())
