"""Tile sizes of the Top-1 kernels, swept per launch site on this GPU: forward + backward time of
each setting against the default's in the same run, every setting's outputs checked.

    python benchmarks/sweep_top1_tiles.py [--kernels top1_element,top1_chunk_exact,top1_chunk_approx,topk:moba_k3_c128]
                                          [--lengths 8192,32768] [--dims 64] [--tokens 131072]
                                          [--sites element.bwd_dkdv,...] [--where FUSE_DQ=1]
                                          [--budget-s 420] [--out DIR]
    python benchmarks/sweep_top1_tiles.py --smoke   # tiny shapes on CPU under TRITON_INTERPRET=1

Each setting is one site's fields (kernels/launch.py: SITES) given through SEQDSL_TOP1_TILES, the
other sites at their defaults. Inputs (B, T, H, D) bf16, H * D = 768, B * T = --tokens (as
benchmarks/bench_top1.py). For each (kernel, T, D): the default's forward + backward time and
outputs (o, dq, dk, dv), then each candidate of each site the kernel launches: its time, its
ratio to the default (higher = faster) and its largest norm-relative difference from the
default's outputs, which must be within top1.TOLERANCE (a setting outside it is marked wrong and
never proposed). A setting the override refuses (a shape the kernel cannot take) is skipped and
listed. Prints the table and the best setting per site, and writes JSON and markdown
(sweep_top1_tiles_<device>_<date>.*). Times here are not the target ratios: bench_top1.py measures
those, against SDPA, with the chosen tiles made the defaults in kernels/launch.py.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (BLOCK_M, BLOCK_N, num_warps, num_stages) around each site's default (kernels/launch.py)
_MN = [(32, 128, 4, 3), (64, 128, 8, 3), (32, 64, 4, 3), (64, 64, 4, 3), (16, 128, 4, 3),
       (32, 128, 8, 3), (32, 128, 4, 2), (32, 128, 4, 4), (64, 128, 4, 3), (128, 128, 8, 2)]
_CHUNK = [(m, None, w, s) for m in (32, 64, 128) for w in (4, 8) for s in (1, 2, 3)]  # no BLOCK_N
# the gate kernels, around the default (64 queries, 32 mean keys, 1024-query slices, 4 warps, 2
# stages; the first sweep's grid was around 64 mean keys, where 32 won every case)
_GATE = ([dict(BLOCK_M=m, BLOCK_C=c, SPLIT_ROWS=1024, num_warps=w, num_stages=s)
          for m in (32, 64, 128) for c in (16, 32) for w in (4, 8) for s in (1, 2)]
         + [dict(BLOCK_M=64, BLOCK_C=32, SPLIT_ROWS=r, num_warps=4, num_stages=2) for r in (512, 2048, 4096)]
         + [dict(BLOCK_M=64, BLOCK_C=64, SPLIT_ROWS=1024, num_warps=4, num_stages=2)])
# the element backward with dq added by the dk/dv kernel (float32 atomics; bwd_dq does not run)
_FUSED = [dict(BLOCK_M=m, BLOCK_N=n, FUSE_DQ=1, num_warps=w, num_stages=s)
          for m, n, w, s in [(64, 128, 4, 3), (64, 128, 8, 3), (32, 128, 4, 3), (32, 128, 8, 3),
                             (128, 128, 8, 2), (64, 64, 4, 3), (64, 128, 4, 2), (64, 128, 8, 2)]]
CANDIDATES = {
    "element.fwd": [(128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3), (128, 64, 4, 3), (64, 128, 4, 3),
                    (128, 32, 8, 4), (64, 64, 4, 4), (128, 64, 8, 4)],
    "element.bwd_dkdv": _MN + _FUSED,
    "element.bwd_dq": [(n, m, w, s) for m, n, w, s in _MN if n >= m] + [(128, 32, 8, 3), (128, 16, 4, 4)],
    "element.value_grad": [(128, 64, 4, 2), (64, 64, 4, 2), (128, 128, 4, 2), (128, 64, 8, 3)],
    "chunk.fwd": _CHUNK,
    "chunk.bwd": _CHUNK,
    "chunk.gate": _GATE,
}
SMOKE = {site: [(16, None if site.startswith("chunk") else 32, 4, 1)] for site in CANDIDATES}
SITES_OF = {"top1_element": [s for s in CANDIDATES if s.startswith("element")],
            "top1_chunk_exact": ["chunk.fwd", "chunk.bwd"], "top1_chunk_approx": ["chunk.fwd", "chunk.bwd", "chunk.gate"]}
# the top-k chunk cases of benchmarks/bench_topk.py (`--kernels topk:moba_k3_c128`): each head its own
# key/value head, grad = none (as bench_topk times them)
TOPK_SITES = ["topk_chunk.select", "topk_chunk.fwd", "topk_chunk.bwd"]
CANDIDATES.update({site: _CHUNK for site in TOPK_SITES})
SMOKE.update({site: [(16, None, 4, 1)] for site in TOPK_SITES})


def fields(cand: tuple | dict) -> dict:
    """A candidate's fields: a dict as it stands, or (BLOCK_M, BLOCK_N or None, warps, stages)."""
    if isinstance(cand, dict):
        return cand
    m, n, w, s = cand
    blocks = {"BLOCK_M": m} if n is None else {"BLOCK_M": m, "BLOCK_N": n}
    return {**blocks, "num_warps": w, "num_stages": s}


def matches(cand: tuple | dict, where: str) -> bool:
    """Whether a candidate has every FIELD=VALUE of `where` (comma-separated; empty: any)."""
    got = fields(cand)
    pairs = [item.split("=", 1) for item in filter(None, where.split(","))]
    return all(str(got.get(name.strip())) == value.strip() for name, value in pairs)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kernels", default="top1_element,top1_chunk_exact,top1_chunk_approx")
    p.add_argument("--lengths", default="8192,32768")
    p.add_argument("--dims", default="64")
    p.add_argument("--tokens", type=int, default=131072)
    p.add_argument("--chunk", type=int, default=128)
    p.add_argument("--sites", default="", help="only these launch sites (default: every site of each kernel)")
    p.add_argument("--where", default="", help="only candidates with these fields, e.g. FUSE_DQ=1,num_warps=8")
    p.add_argument("--budget-s", type=float, default=420.0, help="skip what starts after this many seconds")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on CPU under the interpreter")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    return p.parse_args(argv)


def _rel(x, y) -> float:
    return ((x.float() - y.float()).norm() / (y.float().norm() + 1e-30)).item()


def sweep(args, device) -> list[dict]:
    import torch

    from benchmarks.bench_top1 import bench, case_inputs
    from seqdsl.kernels import launch, top1

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tol = top1.TOLERANCE[dtype]
    candidates = SMOKE if args.smoke else CANDIDATES
    wanted = set(filter(None, args.sites.split(",")))
    start, rows = time.perf_counter(), []
    for T in (int(x) for x in args.lengths.split(",")):
        for dim in (int(x) for x in args.dims.split(",")):
            B, H, q, k, v, do = case_inputs(T, dim, args.tokens, device, dtype, smoke=args.smoke)
            for name, key in _kernel_keys(args.kernels.split(","), dim, args.chunk, H).items():
                kernel = top1.bind(key)

                def step():
                    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                    out = kernel(*leaves)
                    out.backward(do)
                    return [out.detach()] + [t.grad for t in leaves]

                os.environ.pop(launch.TILES_ENV, None)
                want = step()
                base = dict(kernel=name, T=T, dim=dim, B=B, H=H)
                default_ms = bench(step, device)
                rows.append({**base, "site": "default", "tiles": {}, "ms": default_ms, "speedup": 1.0, "diff": 0.0})
                print(json.dumps(rows[-1]), flush=True)
                for site in SITES_OF.get(name, TOPK_SITES):
                    chosen = [c for c in candidates[site] if matches(c, args.where)]
                    for cand in chosen if not wanted or site in wanted else []:
                        if time.perf_counter() - start > args.budget_s:
                            print(f"budget spent: skipping {name} T={T} D={dim} {site} {cand}", flush=True)
                            continue
                        row = {**base, "site": site, "tiles": fields(cand)}
                        os.environ[launch.TILES_ENV] = json.dumps({site: row["tiles"]})
                        try:
                            got = step()
                            row["diff"] = max(_rel(a, b) for a, b in zip(got, want))
                            row["ok"] = row["diff"] <= tol
                            row["ms"] = bench(step, device)
                            row["speedup"] = default_ms / row["ms"]
                        except launch.TileOverrideError as err:  # a shape this kernel cannot take
                            row["refused"] = err.message
                        except Exception as err:  # e.g. out of shared memory: recorded, not hidden
                            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
                        finally:
                            os.environ.pop(launch.TILES_ENV, None)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
            del q, k, v, do
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def _kernel_keys(names: list[str], dim: int, chunk: int, heads: int) -> dict:
    """{name: kernel key} of the asked kernels: bench_top1's Top-1 keys, and topk:CASE for a
    non-grouped case of bench_topk.py."""
    from benchmarks.bench_top1 import keys
    from benchmarks.bench_topk import CASES, generated_key

    top1_keys = keys(dim, chunk)
    out = {}
    for name in names:
        if name.startswith("topk:"):
            case = CASES.get(name[5:])
            if case is None or case.gqa:
                raise SystemExit(f"sweep_top1_tiles: {name}: not a top-k case with a key/value head per query head")
            out[name] = generated_key(case, dim, heads, heads)
        elif name in top1_keys:
            out[name] = top1_keys[name]
    return out


def best(rows: list[dict]) -> list[dict]:
    """Per (kernel, T, D, site): the fastest correct setting, if any beats the default."""
    out = {}
    for r in rows:
        if r["site"] == "default" or not r.get("ok"):
            continue
        at = (r["kernel"], r["T"], r["dim"], r["site"])
        if r["speedup"] > 1.0 and (at not in out or r["speedup"] > out[at]["speedup"]):
            out[at] = r
    return list(out.values())


def table(rows: list[dict]) -> str:
    lines = ["| kernel | T | D | site | tiles | ms | vs default | max diff |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tiles = " ".join(f"{k}={v}" for k, v in r["tiles"].items()) or "-"
        if "ms" in r:
            verdict = "" if r.get("ok", True) else " (wrong)"
            lines.append(f"| {r['kernel']} | {r['T']} | {r['dim']} | {r['site']} | {tiles} | {r['ms']:.3f} | "
                         f"{r['speedup']:.3f}x | {r['diff']:.1e}{verdict} |")
        else:
            lines.append(f"| {r['kernel']} | {r['T']} | {r['dim']} | {r['site']} | {tiles} | - | - | "
                         f"{r.get('refused') or r.get('error')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        args.lengths, args.dims, args.tokens, args.chunk = "37", "16", 37, 16
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if device.type != "cuda" and not args.smoke:
        print("sweep_top1_tiles: needs a CUDA device (or --smoke)", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    date = datetime.date.today().isoformat()
    rows = sweep(args, device)
    result = {"device": name, "date": date, "torch": torch.__version__, "smoke": args.smoke,
              "rows": rows, "best": best(rows)}
    tag = "smoke" if args.smoke else name.split()[1].lower() if len(name.split()) > 1 else "gpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"sweep_top1_tiles_{tag}_{date}"
    md = f"# Top-1 tile sweep, {name}, {date}\n\n{table(rows)}\n\nBest per site:\n\n{table(result['best'])}\n"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    stem.with_suffix(".md").write_text(md)
    print("\n" + md)
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
