#!/usr/bin/env bash
# One GPU round for the generated Top-1 kernels (docs/kernels.md), at most 8 minutes on an H100
# (the 08:51 UTC round took 5; its GPU tests were cut at 7 of 12 by a 140 s cap, hence this order):
#   1. pytest -m gpu tests/kernels  the kernels against float64 at T = 2125, fp32 and bf16 (<= 220 s)
#   2. benchmarks/bench_top1.py     time / TFLOP/s / peak memory vs SDPA, T = 8K, 32K, no Flex (<= 150 s)
#   3. benchmarks/profile_top1.py   torch.profiler breakdown, same shapes (<= 90 s; files kept per case;
#                                   PROFILE=0 skips it)
# TEST_TIMEOUT (default 220 s) caps the tests: the 12 took 178-243 s on an H100 (2026-11-23).
# Results (JSON, markdown, logs) go to $OUT when set (the device tool's folder), else benchmarks/results.
#     bash benchmarks/top1_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out"
"$py" -c "import seqdsl.kernels, seqdsl.codegen as c; print('kernels from', seqdsl.kernels.__file__, 'templates', c.TEMPLATE_DIR)"
export SEQDSL_CACHE_DIR="$(mktemp -d)"
# -v -s: each test's largest errors are logged as it passes, so a time cap keeps those already run
timeout "${TEST_TIMEOUT:-220}" "$py" -m pytest -v -s -p no:cacheprovider -m gpu tests/kernels > "$out/gpu_kernel_tests.log" 2>&1
echo "gpu tests rc=$?"
grep -e "D=.*PASSED" -e FAILED -e ERROR -e "passed" -e "failed" "$out/gpu_kernel_tests.log" | tail -n 14
timeout 150 "$py" benchmarks/bench_top1.py --lengths 8192,32768 --dims 64,128 --flex-max-t 0 --budget-s 90 \
    --out "$out" > "$out/bench_top1.log" 2>&1
echo "bench rc=$?"
cat "$out"/bench_top1_*.md 2>/dev/null
[ "${PROFILE:-1}" = 1 ] || exit 0
timeout 90 "$py" benchmarks/profile_top1.py --out "$out" --steps 3 > "$out/profile_top1.log" 2>&1
echo "profile rc=$?"
grep -h -e "^## " -e "^step " "$out"/profile_top1_*.md 2>/dev/null
