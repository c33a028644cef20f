"""How long `seqdsl check` takes on the spec library, on this machine.

    python benchmarks/bench_check.py [--specs DIR] [--repeat 5] [--out FILE.json]

Times, in one process: the first `import seqdsl.check` (the check path imports neither torch nor
triton), the first `check_paths(specs/)` (which also builds the Lark parser), and the median of
`--repeat` warm calls. Prints a table and writes it as JSON (default
benchmarks/results/bench_check_<date>.json) with the machine and the date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def measure(specs: Path, repeat: int) -> dict:
    start = time.perf_counter()
    from seqdsl.check import check_paths

    imported = time.perf_counter() - start
    start = time.perf_counter()
    reports = check_paths([specs])
    first = time.perf_counter() - start
    warm = []
    for _ in range(repeat):
        start = time.perf_counter()
        check_paths([specs])
        warm.append(time.perf_counter() - start)
    heavy = sorted(m for m in ("torch", "triton", "numpy") if m in sys.modules)
    return {"specs": len(reports), "import_s": imported, "first_s": first, "warm_median_s": statistics.median(warm),
            "repeat": repeat, "heavy_modules_imported": heavy}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", default=str(ROOT / "specs"))
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    row = measure(Path(args.specs), args.repeat)
    date = datetime.date.today().isoformat()
    machine = f"{platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}"
    print(f"machine {machine}; {date}")
    print(f"{'specs':>6} {'import s':>9} {'first check s':>14} {'warm check s':>13}  heavy imports")
    print(f"{row['specs']:>6} {row['import_s']:>9.3f} {row['first_s']:>14.3f} {row['warm_median_s']:>13.3f}  "
          f"{', '.join(row['heavy_modules_imported']) or 'none'}")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"bench_check_{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "date": date, **row}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
