#!/usr/bin/env bash
# One GPU round for the family table of docs/training.md, at most 10 minutes on an H100 (the
# first run, 2026-11-23, needed two calls: the build and four specs took 500 s; RWKV-7 and the
# mamba specs compile for about a minute each):
#   1. benchmarks/build_mamba_ssm.py  mamba-ssm for this GPU only (about 3 minutes; skipped when
#                                      the wheel is cached or mamba_ssm already imports)
#   2. benchmarks/bench_train.py      one spec per family, 110m, compiled + CUDA graphs, 16 x 2K,
#                                      Transformer++ first so every ratio is against the same run
# Needs the mamba-ssm sdist in .sdist/ (see docs/mamba.md). Results go to $OUT when set.
#     bash benchmarks/family_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
ensure_mamba
specs="transformer,window_256,linear_attention,gated_deltanet,rwkv7,mamba2,mamba"
timeout 400 "$py" benchmarks/bench_train.py --specs "$specs" --compile --cuda-graphs --batch 16 \
    --out "$out/bench_train_family_graphs_b16_$date_tag.json" > "$out/bench_train_family.log" 2>&1
echo "bench rc=$?"; grep -v Warning "$out/bench_train_family.log" | tail -n 12
