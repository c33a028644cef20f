#!/usr/bin/env bash
# One GPU round for compiling the self-checks' Triton kernels ahead in parallel
# (seqdsl/kernels/precompile.py), at most ~9 minutes on an H100:
#   1. mamba-ssm built for this GPU (or installed from a carried wheel; gpu_round_common.sh),
#      split into $OUT for the next round to carry when SPLIT_MAMBA_WHEEL=1
#   2. pytest -m gpu tests/kernels/test_precompile.py
#   3. benchmarks/bench_precompile.py: planning on a fresh machine, compiled one after another
#      and ahead in parallel, per spec (SPECS, default mamba2,rwkv7)
# Expects .whl/ as benchmarks/train_command_gpu_round.sh does, and .sdist/ for mamba-ssm.
#     bash benchmarks/precompile_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out" || exit 1
ensure_mamba
"$py" -c "import torch, triton, os; print('torch', torch.__version__, 'triton', triton.__version__, 'cores', os.cpu_count())"
timeout 120 "$py" -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_precompile.py > "$out/gpu_precompile_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -n 3 "$out/gpu_precompile_tests.log"
timeout "${BENCH_TIMEOUT:-420}" "$py" benchmarks/bench_precompile.py --specs "${SPECS:-mamba2,rwkv7}" \
    --out "$out" > "$out/bench_precompile.log" 2>&1
echo "bench rc=$?"; tail -n 8 "$out/bench_precompile.log"
