#!/usr/bin/env bash
# One GPU round, at most 10 minutes on an H100: mamba-ssm built (or installed from .mambawhl/),
# the mamba GPU tests that need the custom ops (compiled model, Mamba-1), and a kernel profile of
# the 110m Mamba-2 training step (compiled, CUDA graphs, 16 x 2K) to show where its time goes.
#     SPLIT_MAMBA_WHEEL=1 bash benchmarks/mamba_profile_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
ensure_mamba
export SEQDSL_CACHE_DIR="${SEQDSL_CACHE_DIR:-$(mktemp -d)}"
timeout "${TEST_TIMEOUT:-120}" "$py" -m pytest -q -p no:cacheprovider -m gpu tests/lower/test_gpu_mamba.py \
    -k "compiles or mamba1" -rA > "$out/gpu_mamba_compile_tests.log" 2>&1
echo "compile and Mamba-1 tests rc=$?"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$out/gpu_mamba_compile_tests.log" | tail -n 12
timeout "${PROFILE_TIMEOUT:-180}" "$py" benchmarks/profile_train.py --spec "${SPEC:-mamba2}" --batch 16 \
    --variants graphs --out "$out/profile_train_${SPEC:-mamba2}_b16_$date_tag.json" > "$out/profile_${SPEC:-mamba2}.log" 2>&1
echo "profile rc=$?"; head -c 6000 "$out/profile_${SPEC:-mamba2}.log"
