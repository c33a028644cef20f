#!/usr/bin/env bash
# Renders the Top-1 kernels that benchmarks/bench_top1.py times (D 64 and 128, chunk 128) as a
# git revision REV generated them, into .ab/before/<slug>.py, for benchmarks/top1_ab_gpu_round.sh
# to load through SEQDSL_KERNEL_OVERRIDE: a template change timed against its predecessor in one
# GPU call. Only the templates may differ between REV and the working tree (the override replaces
# the rendered module; the launch code is the working tree's). .ab/ is ignored by git: carry it to
# the GPU machine (the device tool's carry: [".ab"]).
#     bash benchmarks/top1_ab_prepare.sh bb83c11
set -eu
rev="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python}"
tree="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$tree"' EXIT
git -C "$root" worktree add -q --detach "$tree" "$rev"
rm -rf "$root/.ab/before" && mkdir -p "$root/.ab/before"
(cd "$tree" && "$py" - "$root/.ab/before" <<'PY'
import sys
sys.path.insert(0, ".")
from benchmarks.bench_top1 import keys
from seqdsl import codegen
for dim in (64, 128):
    for key in keys(dim, 128).values():
        with open(f"{sys.argv[1]}/{key.slug()}.py", "w") as f:
            f.write(codegen.render(key).source)
        print(key.slug())
PY
)
echo "$rev" > "$root/.ab/before/REVISION"
