"""Build the mamba-ssm wheel for this machine's GPU only, from its sdist, in a few minutes.

    python benchmarks/build_mamba_ssm.py [--sdist PATH] [--cache-dir DIR] [--jobs 16] [--install]

mamba-ssm's setup.py compiles its CUDA selective scan for every architecture from sm_75 to sm_121
(half an hour and more); this script narrows that list to the capability of the GPU it runs on
(read with torch.cuda.get_device_capability; sm_90a on Hopper), builds with
`MAMBA_FORCE_BUILD=TRUE MAX_JOBS=<jobs> pip wheel --no-build-isolation --no-deps`, and keeps the
wheel in a cache folder named by the torch version, the CUDA version and the architecture
(default `$SEQDSL_CACHE_DIR/mamba-wheels`, else `~/.cache/seqdsl/mamba-wheels`). When a wheel for
this torch/CUDA/architecture is already there, nothing is built. It prints where the wheel is and
how to install it (`pip install <wheel>`). See docs/mamba.md.

Without --sdist, the sdist is downloaded (needs the package index):
    MAMBA_SKIP_CUDA_BUILD=TRUE pip download --no-build-isolation --no-deps --no-binary :all: mamba-ssm==2.3.2.post1
(MAMBA_SKIP_CUDA_BUILD keeps pip from compiling while it reads the metadata). The build needs
nvcc matching torch's CUDA major version, torch, ninja, packaging and setuptools.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

VERSION = "2.3.2.post1"


def cache_root(given: str | None) -> Path:
    if given:
        return Path(given)
    from seqdsl.cache_root import cache_dir  # the one rule for seqdsl's caches

    return cache_dir("mamba-wheels")


def target() -> tuple[str, str]:
    """(cache sub-folder name, nvcc -gencode value) for this machine's first GPU."""
    import torch

    if not torch.cuda.is_available():
        sys.exit("build_mamba_ssm: no CUDA device here; the wheel is built for the GPU it runs on")
    major, minor = torch.cuda.get_device_capability(0)
    arch = f"{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")  # Hopper: wgmma needs sm_90a
    name = f"mamba_ssm-{VERSION}-torch{torch.__version__}-cuda{torch.version.cuda}-sm{arch}"
    return name.replace("+", "_"), f"arch=compute_{arch},code=sm_{arch}"


def narrow_arches(setup_py: Path, gencode: str) -> None:
    """Replace setup.py's hard-coded -gencode list with this machine's architecture alone."""
    text = setup_py.read_text()
    start = text.find('        cc_flag.append("-gencode")')
    end = text.find("    # HACK: The compiler flag -D_GLIBCXX_USE_CXX11_ABI")
    if start < 0 or end < start:
        sys.exit(f"build_mamba_ssm: {setup_py} does not have the architecture list this script "
                 f"knows (mamba-ssm {VERSION}); edit its cc_flag list by hand")
    block = text[start:end]
    if not re.search(r'arch=compute_\d+,code=sm_\d+', block):
        sys.exit("build_mamba_ssm: no -gencode entries where they were expected in setup.py")
    narrowed = f'        cc_flag += ["-gencode", "{gencode}"]  # seqdsl: this GPU only\n\n'
    setup_py.write_text(text[:start] + narrowed + text[end:])


def sdist_path(given: str | None, work: Path) -> Path:
    if given:
        path = Path(given)
        if path.is_dir():
            found = sorted(path.glob(f"mamba_ssm-{VERSION}.tar.gz"))
            if not found:
                sys.exit(f"build_mamba_ssm: no mamba_ssm-{VERSION}.tar.gz in {path}")
            path = found[0]
        return path
    env = os.environ | {"MAMBA_SKIP_CUDA_BUILD": "TRUE"}
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-build-isolation", "--no-deps",
                    "--no-binary", ":all:", f"mamba-ssm=={VERSION}", "-d", str(work)], check=True, env=env)
    return next(work.glob("mamba_ssm-*.tar.gz"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sdist", help=f"mamba_ssm-{VERSION}.tar.gz, or a folder holding it")
    ap.add_argument("--cache-dir", help="where built wheels are kept")
    ap.add_argument("--jobs", type=int, default=16, help="parallel nvcc jobs (MAX_JOBS)")
    ap.add_argument("--install", action="store_true", help="pip install the wheel afterwards")
    args = ap.parse_args()

    name, gencode = target()
    folder = cache_root(args.cache_dir) / name
    wheels = sorted(folder.glob("mamba_ssm-*.whl"))
    if wheels:
        print(f"build_mamba_ssm: a wheel for this torch/CUDA/GPU is cached, not building: {wheels[0]}")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            with tarfile.open(sdist_path(args.sdist, work)) as tar:
                tar.extractall(work, filter="data")
            src = next(p for p in work.iterdir() if p.is_dir() and p.name.startswith("mamba_ssm-"))
            narrow_arches(src / "setup.py", gencode)
            env = os.environ | {"MAMBA_FORCE_BUILD": "TRUE", "MAX_JOBS": str(args.jobs)}
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                            "-w", str(work / "dist"), str(src)], check=True, env=env)
            built = next((work / "dist").glob("mamba_ssm-*.whl"))
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy2(built, folder / built.name)
            wheels = [folder / built.name]
            print(f"build_mamba_ssm: built {built.name} for {gencode} in {time.perf_counter() - t0:.0f} s")
    wheel = wheels[0]
    print(f"wheel: {wheel} ({wheel.stat().st_size / 2**20:.1f} MiB)")
    print(f"install it (no rebuild on later runs):  pip install --no-deps {wheel}")
    print(f"cache folder (reused while torch, CUDA and the GPU stay the same): {folder.parent}")
    if args.install:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", str(wheel)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
