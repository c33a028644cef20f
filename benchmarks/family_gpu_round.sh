#!/usr/bin/env bash
# One GPU round for the family table of docs/training.md, at most 9 minutes on an H100:
#   1. benchmarks/build_mamba_ssm.py  mamba-ssm for this GPU only (about 3 minutes; skipped when
#                                      the wheel is cached or mamba_ssm already imports)
#   2. benchmarks/bench_train.py      one spec per family, 110m, compiled + CUDA graphs, 16 x 2K,
#                                      Transformer++ first so every ratio is against the same run
# Needs the mamba-ssm sdist in .sdist/ (see docs/mamba.md). Results go to $OUT when set.
#     bash benchmarks/family_gpu_round.sh
set -u
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
py="${PYTHON:-python}"
date_tag="$(date -u +%Y-%m-%d)"
if ! "$py" -c "import mamba_ssm" 2> /dev/null; then
    timeout 300 "$py" benchmarks/build_mamba_ssm.py --sdist .sdist/mamba_ssm-*.tar.gz --install \
        > "$out/build_mamba.log" 2>&1
    echo "mamba build rc=$?"; tail -n 3 "$out/build_mamba.log"
fi
specs="transformer,window_256,linear_attention,gated_deltanet,rwkv7,mamba2,mamba"
timeout 330 "$py" benchmarks/bench_train.py --specs "$specs" --compile --cuda-graphs --batch 16 \
    --out "$out/bench_train_family_graphs_b16_$date_tag.json" > "$out/bench_train_family.log" 2>&1
echo "bench rc=$?"; grep -v Warning "$out/bench_train_family.log" | tail -n 12
