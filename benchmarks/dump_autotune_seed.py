"""Record the autotuning a real training step does on this GPU, for seqdsl to ship and seed
(seqdsl/lower/backends/autotune_seed.py says how Triton keys and reads these files).

    python benchmarks/dump_autotune_seed.py [--specs rwkv7] [--seq 2048] [--micro-batch 16] [--out DIR]

In a fresh, empty Triton cache (a temporary TRITON_CACHE_DIR, results caching on, the shipped
seed off so that everything is tuned here): one training step of each spec at the 110m preset
(benchmarks/bench_train.py's `bench_spec`: the model, compile and CUDA graphs of `seqdsl train`
at its micro batch, with the first-use self-checks), then every `<digest>/<kernel>.autotune.json`
the step wrote is copied to this GPU's folder (`autotune_seed.gpu_folder`) under --out (default
seqdsl/lower/backends/autotune-seed), the choices of
the autotuners Triton keeps in memory only (configs with a pre_hook) are merged into its
pins.json (seqdsl/lower/backends/autotune_pins.py), and a line appended to its README says the
GPU, versions and shapes. What is recorded is the third-party autotuners' own choice
on this GPU, nothing tuned by hand. GPU only.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


HEADER = """# Shipped autotuning results (seqdsl/lower/backends/autotune_seed.py)

One file per (kernel, shapes) that a training step of the spec and its first-use self-checks
tuned, in Triton's own format, under Triton's digest, in one folder per GPU
(`<gpu>/<digest>/<kernel>.autotune.json`; `gpu_folder`: the GPU's name and architecture). Triton
reads a file only where that digest (Triton's build, GPU backend, kernel source, environment,
shapes, candidate configs) is the same; anywhere else it autotunes as before. The digest names
the architecture, not the GPU, so seqdsl seeds this GPU's recording of a tuning first and
another GPU's of the same architecture only where this one has none (and says so).
`pins.json`: the choices Triton keeps in memory only (configs with a pre_hook), put back by
seqdsl for the same GPU kind and versions (seqdsl/lower/backends/autotune_pins.py). Recordings
(each line appended by the dump):

"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--specs", default="rwkv7")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--out", default=None, help="the recordings' root (default: the shipped one)")
    args = p.parse_args(argv)
    cache = Path(tempfile.mkdtemp(prefix="triton_cache_"))
    os.environ.update(TRITON_CACHE_DIR=str(cache), TRITON_CACHE_AUTOTUNING="1", SEQDSL_AUTOTUNE_SEED="0")
    import torch
    import triton

    if not torch.cuda.is_available():
        raise SystemExit("dump_autotune_seed.py records a GPU's autotuning: no CUDA device here")
    from bench_train import bench_spec

    from seqdsl.lower.backends import autotune_pins
    from seqdsl.lower.backends.autotune_seed import SEED_DIR, collect, gpu_folder

    device = torch.device("cuda")
    for spec in args.specs.split(","):
        row = bench_spec(spec, "110m", args.seq, args.micro_batch, 1, 1, device, True, True)
        print(f"{spec}: one step done ({row.get('paths', '')})", flush=True)
    gpu = gpu_folder(torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
    out = Path(args.out) if args.out else SEED_DIR
    n = collect(cache, out / gpu)
    # the tunings Triton keeps in memory only (configs with a pre_hook): seqdsl's own records
    kept = autotune_pins.record(("mamba_ssm", "fla"), torch.cuda.get_device_name(0), triton.__version__)
    pins = out / autotune_pins.PINS.name
    autotune_pins.write(pins, autotune_pins.merge(autotune_pins.read(pins), kept))
    versions = {}
    for name in ("fla", "mamba_ssm"):
        try:
            versions[name] = __import__(name).__version__
        except Exception:
            pass
    readme = out / "README.md"
    text = readme.read_text() if readme.exists() else HEADER
    text += (f"- `{gpu}/`, {datetime.date.today().isoformat()}, `benchmarks/dump_autotune_seed.py --specs {args.specs} "
             f"--seq {args.seq} --micro-batch {args.micro_batch}` on {torch.cuda.get_device_name(0)}, torch "
             f"{torch.__version__}, Triton {triton.__version__}"
             + "".join(f", {k} {v}" for k, v in versions.items()) + f": {n} files, {len(kept)} pinned choices\n")
    readme.write_text(text)
    print(f"collected {n} autotuning files and {len(kept)} in-memory choices (pins.json) into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
