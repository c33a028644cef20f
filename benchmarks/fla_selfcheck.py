"""Which flash-linear-attention kernels pass seqdsl's self-check on this GPU.

    python benchmarks/fla_selfcheck.py [--out fla_selfcheck.json]

For each fla op seqdsl maps a spec to, in bfloat16 and float32, with each kind of decay seqdsl
passes it (fla picks different kernels), runs `seqdsl.lower.backends.fla.self_check` (forward and backward
against the reference) and prints ok / the reason it failed, and the seconds it took (mostly
Triton compilation and autotuning). Writes the table as JSON with the device, versions and date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch

from seqdsl.lower.backends import fla as fla_backend

# (op, kinds of decay seqdsl passes it)
CASES = [("fla.chunk_simple_gla", ("none", "scalar")), ("fla.chunk_delta_rule", ("none",)),
         ("fla.chunk_gated_delta_rule", ("scalar",)), ("fla.chunk_gla", ("vector",)),
         ("fla.chunk_rwkv6", ("vector",)), ("fla.chunk_rwkv7", ("vector",))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="fla_selfcheck.json")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: fla kernels run on GPUs only", file=sys.stderr)
        return 2
    import triton

    device = torch.device("cuda")
    meta = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "torch": torch.__version__, "triton": triton.__version__}
    rows = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for op, variants in CASES:
            for decay in variants:
                t0 = time.perf_counter()
                ok, detail = fla_backend.self_check(op, dtype, device, 64, 64, decay=decay)
                rows.append({"op": op, "dtype": dtype_name, "decay": decay, "ok": ok, "detail": detail,
                             "seconds": round(time.perf_counter() - t0, 1)})
                r = rows[-1]
                print(f"{op:<28} {dtype_name:<9} {decay:<7} "
                      f"{'ok' if ok else 'FAIL'} {r['seconds']:>6.1f}s {detail[:120]}", flush=True)
                Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"{meta['device']}, torch {meta['torch']}, triton {meta['triton']}, {meta['date']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
