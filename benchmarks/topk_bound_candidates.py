"""How many keys the top-k element select's bound keeps (codegen/templates/topk_element.py.jinja):
i.i.d. normal scores, keys in strided groups (key n in group n mod KSLOTS of its span of KSLOTS x
GROUPS, GROUPS = 1024 / KSLOTS as kernels/topk_element.py: bound_shape), tau the k-th best group
maximum, candidates the keys >= tau. Prints a table, writes JSON (CPU, seconds).

    python benchmarks/topk_bound_candidates.py [--keys 4096] [--draws 200] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=4096)
    p.add_argument("--draws", type=int, default=200)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "topk_bound_candidates_cpu.json"))
    args = p.parse_args()
    g = torch.Generator().manual_seed(0)
    rows = []
    print(f"{'k':>4} {'KSLOTS':>6} {'GROUPS':>6} {'mean / k':>9} {'max':>5} {'CAP':>5} {'over CAP':>9}")
    for k in (16, 64):
        kslots = max(16, 1 << (k - 1).bit_length())
        groups = max(1, 1024 // kslots)
        counts = []
        for _ in range(args.draws):
            s = torch.randn(args.keys, generator=g)
            group_max = s.view(-1, groups, kslots).amax(1).flatten()
            tau = group_max.topk(k).values[-1]
            counts.append(int((s >= tau).sum()))
        c = torch.tensor(counts, dtype=torch.float64)
        row = dict(k=k, kslots=kslots, groups=groups, keys=args.keys, draws=args.draws,
                   mean_over_k=(c.mean() / k).item(), max=int(c.max()), cap=2 * kslots, over_cap=int((c > 2 * kslots).sum()))
        rows.append(row)
        print(f"{k:>4} {kslots:>6} {groups:>6} {row['mean_over_k']:>9.3f} {row['max']:>5} {row['cap']:>5} {row['over_cap']:>9}")
    Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
