"""Stage (1)'s causal conv with SiLU: the Triton kernel (kernels/causal_conv.py) against its
reference taps (seqdsl/reference/conv.py), eager and compiled by inductor (what `seqdsl train`
ran before the kernel), at Mamba-2's 110m shape, forward and forward + backward.

    python benchmarks/bench_conv.py [--batch 16] [--seq 2048] [--channels 1792] [--taps 4]
                                    [--dtype bf16] [--sweep] [--out DIR | FILE.json]

Times are CUDA-event medians within a second's budget after a warm-up (bench_top1.py: bench). "GB/s" counts the bytes a pass must
move at least (forward: u in, y out; backward: u and dy in, du out), so it reads against the
GPU's memory bandwidth. --sweep also times the kernel's tile settings (SEQDSL_TOP1_TILES sites
conv.fwd, conv.bwd, conv.bwd_du; each checked against the reference) and reports the fastest. Prints the
tables and writes JSON (bench_conv_<device>_<date>.json in --out's folder, default benchmarks/results).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_top1 import bench  # noqa: E402
from seqdsl.kernels import causal_conv, launch  # noqa: E402
from seqdsl.reference.conv import causal_conv_silu  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def timings(conv, u, w, dy) -> dict[str, float]:
    """{"fwd": ms, "fwd+bwd": ms} of y = conv(u, w) and its backward."""
    def forward():
        with torch.no_grad():
            conv(u, w)

    def both():
        y = conv(u, w)
        torch.autograd.backward(y, dy)

    device = torch.device("cuda")
    return {"fwd": bench(forward, device), "fwd+bwd": bench(both, device)}


def errors(conv, u, w, dy) -> float:
    """The largest norm-relative error of y, du, dw against the reference in float64."""
    leaves = [u.detach().requires_grad_(), w.detach().requires_grad_()]
    y = conv(*leaves)
    y.backward(dy)
    ref = [t.detach().double().requires_grad_() for t in leaves]
    want = causal_conv_silu(*ref)[0]
    want.backward(dy.double())
    rel = lambda a, b: ((a.double() - b).norm() / b.norm()).item()
    return max(rel(y, want), rel(leaves[0].grad, ref[0].grad), rel(leaves[1].grad, ref[1].grad))


def sweep(site: str, grid: dict[str, tuple], u, w, dy, tol: float) -> list[dict]:
    rows = []
    names = list(grid)
    for values in itertools.product(*grid.values()):
        cfg = dict(zip(names, values))
        if site == "conv.bwd" and cfg["SPAN"] % cfg["BLOCK_T"]:
            continue
        os.environ[launch.TILES_ENV] = json.dumps({site: cfg})
        try:
            err = errors(causal_conv.causal_conv_silu, u, w, dy)
            if not err <= tol:
                rows.append(cfg | {"error": f"differs by {err:.1e}"})
                continue
            ms = timings(causal_conv.causal_conv_silu, u, w, dy)
            rows.append(cfg | ms)
        except Exception as exc:  # a setting the compiler refuses (registers, shared memory) is a finding
            rows.append(cfg | {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"})
        finally:
            os.environ.pop(launch.TILES_ENV, None)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--channels", type=int, default=1792)
    ap.add_argument("--taps", type=int, default=4)
    ap.add_argument("--dtype", choices=DTYPES, default="bf16")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--out", type=Path, help="a folder (default benchmarks/results) or a .json file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_conv.py needs a CUDA GPU")
    dtype = DTYPES[args.dtype]
    g = torch.Generator().manual_seed(0)
    shape = (args.batch, args.seq, args.channels)
    u = torch.randn(shape, generator=g).to("cuda", dtype).requires_grad_()
    w = (torch.randn(args.channels, args.taps, generator=g) / args.taps).cuda().requires_grad_()
    dy = torch.randn(shape, generator=g).to("cuda", dtype)
    nbytes = u.numel() * u.element_size()
    gbps = lambda passes, ms: passes * nbytes / ms / 1e6
    reference = lambda a, b: causal_conv_silu(a, b)[0]
    columns = {"reference, eager": reference, "reference, compiled (inductor)": torch.compile(reference),
               "triton.causal_conv": causal_conv.causal_conv_silu}
    device = torch.cuda.get_device_name()
    print(f"device {device}; u {shape} {args.dtype}, {args.taps} taps")
    print(f"{'path':<32} {'fwd ms':>8} {'GB/s':>7} {'fwd+bwd ms':>11} {'bwd GB/s':>9} {'error':>8}")
    results = {}
    for name, conv in columns.items():
        ms = timings(conv, u, w, dy)
        err = errors(conv, u, w, dy)
        bwd = ms["fwd+bwd"] - ms["fwd"]
        results[name] = ms | {"error": err, "fwd_GBps": gbps(2, ms["fwd"]), "bwd_GBps": gbps(3, bwd)}
        print(f"{name:<32} {ms['fwd']:8.3f} {gbps(2, ms['fwd']):7.0f} {ms['fwd+bwd']:11.3f} {gbps(3, bwd):9.0f} "
              f"{err:8.1e}")
    base = results["reference, compiled (inductor)"]["fwd+bwd"]
    print(f"kernel vs compiled reference, fwd+bwd: {base / results['triton.causal_conv']['fwd+bwd']:.2f}x")
    record = {"device": device, "date": datetime.date.today().isoformat(), "shape": shape, "taps": args.taps,
              "dtype": args.dtype, "torch": torch.__version__, "paths": results}
    if args.sweep:
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        grids = {"conv.fwd": {"BLOCK_T": (32, 64, 128), "BLOCK_C": (64, 128), "num_warps": (4, 8)},
                 "conv.bwd": {"BLOCK_T": (16, 32, 64), "BLOCK_C": (32, 64, 128), "SPAN": (256, 512),
                              "num_warps": (4, 8)},
                 "conv.bwd_du": {"BLOCK_T": (32, 64), "BLOCK_C": (64, 128), "num_warps": (4, 8)}}
        for site, grid in grids.items():
            rows = sweep(site, grid, u, w, dy, tol)
            record[f"sweep {site}"] = rows
            timed = [r for r in rows if "fwd+bwd" in r]
            measure = "fwd" if site == "conv.fwd" else "fwd+bwd"
            failed = [r for r in rows if "error" in r]
            best = sorted(timed, key=lambda r: r[measure])[:3]
            print(f"{site}: {len(timed)} settings timed, {len(failed)} failed; fastest by {measure}:")
            for r in best:
                print("   ", {k: v for k, v in r.items() if k not in ("fwd", "fwd+bwd")}, f"{r[measure]:.3f} ms")
    out = args.out or ROOT / "benchmarks" / "results"
    if out.suffix != ".json":  # a folder, as the other benchmarks take
        out = out / f"bench_conv_{device.split()[-1].lower()}_{datetime.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
