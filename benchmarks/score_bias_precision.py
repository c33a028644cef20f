"""Precision of the decayed softmax with length: split-vs-full and against an exact oracle.

    python benchmarks/score_bias_precision.py [--lengths 300,1024,4096] [--oracle-max 1024]
                                              [--out results.json]

Spec `heads = 2  head_dim = 64  decay = data_dependent(scalar)` at d_model 128, dt bias 0 (log
decays about -5 a step, the case of issue 8). For each length T and dtype (float32, float64):
the max |difference| between the full forward and the forward split at T/2, and (for
T <= --oracle-max) against an oracle that recomputes the mixer from its parameters in float64
with the decay bias summed exactly in integers and rounded once. Prints a table and writes the
rows, the device and the date as JSON. The oracle is O(T^2) Python big-integer arithmetic:
seconds at T = 1024.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

import torch

import seqdsl
from seqdsl.lower.mixer import MixerModule

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.oracles
from tests.oracles.decayed_softmax import decayed_softmax_oracle  # noqa: E402

SPEC = "mixer f { heads = 2  head_dim = 64  decay = data_dependent(scalar) }"
D_MODEL = 128


def measure(T: int, dtype: torch.dtype, with_oracle: bool) -> dict:
    torch.manual_seed(0)
    m = MixerModule(seqdsl.loads(SPEC).program.mixer("f"), D_MODEL, context=max(T, 2048)).to(dtype)
    with torch.no_grad():
        m.dt_proj.bias.zero_()
        x = torch.randn(1, T, D_MODEL, dtype=dtype)
        full, _ = m(x)
        first, state = m(x[:, :T // 2])
        rest, _ = m(x[:, T // 2:], state)
        row = {"T": T, "dtype": str(dtype).removeprefix("torch."),
               "split_vs_full": (full - torch.cat([first, rest], 1)).abs().max().item()}
        if with_oracle:
            row["vs_exact_oracle"] = (full.double() - decayed_softmax_oracle(m, x)).abs().max().item()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="300,1024,4096")
    parser.add_argument("--oracle-max", type=int, default=1024)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = [measure(T, dtype, T <= args.oracle_max)
            for T in (int(t) for t in args.lengths.split(",")) for dtype in (torch.float32, torch.float64)]
    print(f"{'T':>6} {'dtype':>8} {'split vs full':>14} {'vs exact oracle':>16}")
    for r in rows:
        oracle_err = f"{r['vs_exact_oracle']:.1e}" if "vs_exact_oracle" in r else "-"
        print(f"{r['T']:>6} {r['dtype']:>8} {r['split_vs_full']:>14.1e} {oracle_err:>16}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": platform.processor() or platform.machine(), "torch": torch.__version__,
                       "date": datetime.date.today().isoformat(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
