#!/usr/bin/env bash
# One GPU round for the mamba-ssm paths (docs/mamba.md), at most 10 minutes on an H100:
#   1. benchmarks/build_mamba_ssm.py  mamba-ssm for this GPU only (about 3 minutes; skipped when
#                                      mamba_ssm already imports)
#   2. pytest -m gpu                   the compiled-model test first (custom ops, one graph), then the
#                                      Mamba-1 tests, then the rest of tests/lower/test_gpu_mamba.py
#   3. benchmarks/bench_train.py      Transformer++, Mamba-2 and Mamba-1 at 110m, compiled + CUDA
#                                      graphs, 16 x 2K, in one call
# Needs the mamba-ssm sdist in .sdist/ (docs/mamba.md). Results go to $OUT when set.
#     bash benchmarks/mamba_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
ensure_mamba
export SEQDSL_CACHE_DIR="${SEQDSL_CACHE_DIR:-$(mktemp -d)}"
tests=tests/lower/test_gpu_mamba.py
timeout 120 "$py" -m pytest -q -p no:cacheprovider -m gpu "$tests" -k "compiles or mamba1" -rA \
    > "$out/gpu_mamba_compile_tests.log" 2>&1
echo "compile and Mamba-1 tests rc=$?"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$out/gpu_mamba_compile_tests.log" | tail -n 10
timeout 150 "$py" benchmarks/bench_train.py --specs transformer,mamba2,mamba --compile --cuda-graphs --batch 16 \
    --out "$out/bench_train_mamba_graphs_b16_$date_tag.json" > "$out/bench_train_mamba.log" 2>&1
echo "bench rc=$?"; grep -E "^(device|spec|transformer|mamba)" "$out/bench_train_mamba.log"
timeout 200 "$py" -m pytest -q -p no:cacheprovider -m gpu "$tests" -k "not compiles and not mamba1" -rA \
    > "$out/gpu_mamba_tests.log" 2>&1
echo "other mamba GPU tests rc=$?"; grep -E "passed|failed" "$out/gpu_mamba_tests.log" | tail -n 3
