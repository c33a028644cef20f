"""How long planning takes on a fresh machine with the self-checks' Triton kernels compiled one
after another (SEQDSL_PRECOMPILE=0) and in parallel ahead of each check (seqdsl/kernels/
precompile.py), per spec: each measurement a fresh process with empty caches of its own
(Triton's kernels and autotuning, seeded with seqdsl's shipped tunings as on any machine;
inductor's; seqdsl's verdicts), timing `LanguageModel.plan_paths` under bf16 autocast as
`seqdsl train` plans (the imports, the self-checks and their compilation; no training step).

    python benchmarks/bench_precompile.py --specs mamba2,rwkv7 [--repeats 1] [--out DIR]

Prints a table and writes JSON (device, date, versions, every measurement). GPU only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# one measurement, in the child: model, then planning timed, then what the self-checks cost
CHILD = r"""
import json, logging, sys, time
logging.basicConfig(level=logging.INFO, format="%(message)s")
t0 = time.perf_counter()
import torch
sys.path.insert(0, {root!r} + "/benchmarks")
from bench_train import spec_at
from seqdsl.lower import verdicts
from seqdsl.lower.lm import LanguageModel
program, spec = spec_at({spec!r}, "110m", 2048)
lm = LanguageModel(program, spec).to("cuda")
t1 = time.perf_counter()
lm.plan_paths("cuda", torch.bfloat16)
torch.cuda.synchronize()
t2 = time.perf_counter()
spent = verdicts.spent()
print("RESULT " + json.dumps({{"startup_s": t1 - t0, "plan_s": t2 - t1, "selfcheck_s": spent.seconds,
                              "checks": spent.computed,
                              "paths": sorted({{op for _, _, op, _ in lm.describe_paths("cuda")}})}}))
"""


def measure(spec: str, precompile: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_precompile_") as cold:
        env = dict(os.environ, SEQDSL_PRECOMPILE="1" if precompile else "0",
                   TRITON_CACHE_DIR=f"{cold}/triton", TORCHINDUCTOR_CACHE_DIR=f"{cold}/inductor",
                   SEQDSL_CACHE_DIR=f"{cold}/seqdsl", CUDA_CACHE_PATH=f"{cold}/cuda")
        done = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), spec=spec)], env=env,
                              capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        return {"spec": spec, "precompile": precompile, "error": (done.stderr or done.stdout).strip()[-400:]}
    ahead = [line for line in done.stderr.splitlines() if "compiled ahead" in line]
    return {"spec": spec, "precompile": precompile, **json.loads(lines[0][len("RESULT "):]), "ahead": ahead}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", default="mamba2,rwkv7,top1_chunk_exact")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    import torch
    import triton

    if not torch.cuda.is_available():
        print("bench_precompile: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    print(f"{'spec':<20} {'precompile':>10} {'plan s':>8} {'self-checks s':>14} {'checks':>6}  paths / ahead")
    for spec in args.specs.split(","):
        for _ in range(args.repeats):
            for on in (False, True):
                row = measure(spec, on)
                rows.append(row)
                if "error" in row:
                    print(f"{spec:<20} {str(on):>10}  error: {row['error']}")
                    continue
                print(f"{spec:<20} {str(on):>10} {row['plan_s']:>8.1f} {row['selfcheck_s']:>14.1f} "
                      f"{row['checks']:>6}  {', '.join(row['paths'])}; {' | '.join(row['ahead'])}")
    device = torch.cuda.get_device_name()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = Path(args.out) / f"bench_precompile_{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": device, "date": date, "torch": torch.__version__,
                               "triton": triton.__version__, "cores": os.cpu_count(), "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
