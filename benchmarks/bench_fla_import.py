"""How long importing fla's ops takes, each in a fresh interpreter: fla's whole package (`import
fla; from fla import ops`, what seqdsl did before) against seqdsl's `import_ops` (the ops without
fla's layers and models: seqdsl/lower/backends/fla.py), alternating, --repeats times each. torch
and torch._dynamo are imported before the clock starts in both (a compiled training run imports
them anyway). Prints a table, writes JSON.

    python benchmarks/bench_fla_import.py [--repeats 5] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = "import time, torch, torch._dynamo\nt = time.perf_counter()\n"
WAYS = {
    "import fla; from fla import ops": "import fla\nfrom fla import ops\n",
    "seqdsl import_ops": "from seqdsl.lower.backends.fla import import_ops\nimport_ops()\n",
}
EPILOGUE = "print(time.perf_counter() - t)\n"


def once(code: str) -> float:
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", PRELUDE + code + EPILOGUE], capture_output=True,
                         text=True, cwd=ROOT, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = p.parse_args(argv)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(args.repeats):  # alternating, so drift in the machine's state hits both
        for way, code in WAYS.items():
            times[way].append(once(code))
    base = statistics.median(times["import fla; from fla import ops"])
    print(f"{'how':34} {'median s':>9} {'min s':>7} {'max s':>7} {'vs fla':>7}")
    rows = []
    for way, ts in times.items():
        med = statistics.median(ts)
        rows.append(dict(how=way, median_s=med, min_s=min(ts), max_s=max(ts), ratio=med / base, runs=ts))
        print(f"{way:34} {med:9.2f} {min(ts):7.2f} {max(ts):7.2f} {med / base:6.2f}x")
    import fla  # noqa: F401  (the version, after the timed runs)
    import torch
    import triton

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({platform.processor() or 'x86_64'})"
    date = datetime.date.today().isoformat()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"bench_fla_import_{'gpu' if torch.cuda.is_available() else 'cpu'}_{date}.json"
    path.write_text(json.dumps(dict(device=device, date=date, torch=torch.__version__, triton=triton.__version__,
                                    fla=fla.__version__, repeats=args.repeats, rows=rows), indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
