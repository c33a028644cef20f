#!/usr/bin/env bash
# One GPU round for training speed (docs/training.md), at most 9 minutes on an H100:
#   1. benchmarks/profile_train.py  Transformer++ 110m, 2K, batch 16: the step `seqdsl train` runs,
#                                    compiled and compiled + CUDA graphs, with a kernel profile
#   2. benchmarks/bench_train.py    the same step for Transformer++ and the Top-1 family, compiled +
#                                    CUDA graphs, batch 16 x 2K, then batch 4 x 8K
# Results (JSON, logs) go to $OUT when set (the device tool's folder), else benchmarks/results.
#     bash benchmarks/train_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
timeout 200 "$py" benchmarks/profile_train.py --variants compiled,graphs --batch 16 \
    --out "$out/profile_train_transformer_b16_library_$date_tag.json" > "$out/profile_train.log" 2>&1
echo "profile rc=$?"; grep -v Warning "$out/profile_train.log" | head -n 40
specs="transformer,top1_chunk_approx,top1_chunk_exact,top1_element"
timeout 200 "$py" benchmarks/bench_train.py --specs "$specs" --compile --cuda-graphs --batch 16 \
    --out "$out/bench_train_graphs_b16_$date_tag.json" > "$out/bench_train_2k.log" 2>&1
echo "bench 2K rc=$?"; grep -v Warning "$out/bench_train_2k.log" | tail -n 12
timeout 150 "$py" benchmarks/bench_train.py --specs transformer,top1_chunk_approx --compile --cuda-graphs \
    --seq 8192 --batch 4 --out "$out/bench_train_graphs_8k_$date_tag.json" > "$out/bench_train_8k.log" 2>&1
echo "bench 8K rc=$?"; grep -v Warning "$out/bench_train_8k.log" | tail -n 8
