#!/usr/bin/env bash
# One GPU round for the mamba-ssm paths (docs/mamba.md), at most 10 minutes on an H100:
#   1. mamba-ssm for this GPU (gpu_round_common.sh: ensure_mamba; carried, built or installed)
#   2. benchmarks/bench_train.py    Transformer++ and Mamba-2 (SPECS) at 110m, compiled + CUDA
#                                   graphs, 16 x 2K, in one call (BENCH=0 skips it)
#   3. pytest -m gpu                tests/lower/test_gpu_mamba.py, the tests TESTS selects (default:
#                                   the compiled models, one graph each, against eager; none: skip)
#   4. benchmarks/bench_mamba.py    with LAYER=1: one Mamba-2 layer's mixing, forward + backward, on
#                                   mamba.ssd at chunk sizes 64, 128 and 256 and on the reference
#   5. benchmarks/profile_train.py  with PROFILE=1: where the compiled step of SPEC (mamba2) spends
#                                   its time, kernel by kernel (16 x 2K, CUDA graphs)
# SPLIT_MAMBA_WHEEL=1 returns a fresh build in parts for later rounds to carry (gpu_round_common.sh).
# mamba-ssm autotunes each kernel at its first call for each shape (a minute and more per model).
# Results go to $OUT when set.
#     bash benchmarks/mamba_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
ensure_mamba
export SEQDSL_CACHE_DIR="${SEQDSL_CACHE_DIR:-$(mktemp -d)}"
if [ "${BENCH:-1}" = 1 ]; then
timeout "${BENCH_TIMEOUT:-320}" "$py" benchmarks/bench_train.py --specs "${SPECS:-transformer,mamba2}" --compile \
    --cuda-graphs --batch 16 --out "$out/bench_train_mamba_graphs_b16_$date_tag.json" > "$out/bench_train_mamba.log" 2>&1
echo "bench rc=$?"; grep -E "^(device|spec|transformer|mamba)" "$out/bench_train_mamba.log"
fi
if [ "${TESTS:-compiles}" != none ]; then
timeout "${TEST_TIMEOUT:-220}" "$py" -m pytest -v -p no:cacheprovider -m gpu tests/lower/test_gpu_mamba.py \
    -k "${TESTS:-compiles}" > "$out/gpu_mamba_tests.log" 2>&1
echo "mamba GPU tests rc=$?"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$out/gpu_mamba_tests.log" | tail -n 30
fi
if [ "${LAYER:-0}" = 1 ]; then
    timeout "${LAYER_TIMEOUT:-300}" "$py" benchmarks/bench_mamba.py --layer-specs mamba2 --ssd-chunks 64,128 \
        --skip-train --out "$out/bench_mamba_layer_chunks_$date_tag.json" > "$out/bench_mamba_layer.log" 2>&1
    echo "layer bench rc=$?"; sed -n '/mixing/,$p' "$out/bench_mamba_layer.log"
fi
if [ "${PROFILE:-0}" = 1 ]; then
    spec="${SPEC:-mamba2}"
    timeout "${PROFILE_TIMEOUT:-180}" "$py" benchmarks/profile_train.py --spec "$spec" --batch 16 --variants graphs \
        --out "$out/profile_train_${spec}_b16_$date_tag.json" > "$out/profile_$spec.log" 2>&1
    echo "profile rc=$?"; head -c 6000 "$out/profile_$spec.log"
fi
