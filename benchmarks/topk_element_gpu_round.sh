#!/usr/bin/env bash
# One GPU round for the top-k element select with a bound (docs/kernels.md, "Top-k element
# selection"), at most ~9 minutes:
#   1. pytest -m gpu: the top-k element kernels (k 16 and 64, float32 and bf16, full and a window
#      with sinks, grad = none and the STE) against float64 (TEST_FILTER: a pytest -k expression)
#   2. benchmarks/bench_topk.py --cases $CASES (default element_k16,element_k64) at 8K / 32K, D 64, --check
#   3. (PROFILE=1, the default) benchmarks/profile_top1.py --kernels sdpa_cudnn,topk:element_k16,topk:element_k64
#      at 8K, D 64
#   4. (FLEX=1) bench_topk.py MoBA k 3 of 128 at D 64 with --flex-kernel-options "$FLEX_OPTIONS"
# Results (JSON, markdown, one archive of the logs) go to $OUT when set, else benchmarks/results.
#     bash benchmarks/topk_element_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
trap '(cd "$out" && ls ./*.log > /dev/null 2>&1 && tar czf logs_topk_element.tgz ./*.log && rm -f ./*.log)' EXIT
install_packages "$out" || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout "${TEST_TIMEOUT:-200}" "$py" -m pytest -q -s -p no:cacheprovider -m gpu -k "${TEST_FILTER:-gpu}" \
    tests/kernels/test_topk_element_kernels.py > "$out/gpu_topk_element_tests.log" 2>&1
echo "gpu tests rc=$?"
grep -e "D=" -e FAILED -e ERROR -e "passed" -e "failed" "$out/gpu_topk_element_tests.log" | tail -n 8
timeout 220 "$py" benchmarks/bench_topk.py --cases "${CASES:-element_k16,element_k64}" --lengths 8192,32768 --dims 64 \
    --check --budget-s 160 --out "$out" > "$out/bench_topk_element.log" 2>&1
echo "bench rc=$?"
grep -e "^| [0-9]" -e "check" "$out"/bench_topk_*element*.md 2>/dev/null | head -n 12
if [ "${PROFILE:-1}" = 1 ]; then
    timeout 120 "$py" benchmarks/profile_top1.py --kernels sdpa_cudnn,topk:element_k16,topk:element_k64 \
        --lengths 8192 --dims 64 --out "$out" > "$out/profile_topk_element.log" 2>&1
    echo "profile rc=$?"
    grep -e "step ms" -e "_select" -e "_attn" -e "^##" "$out/profile_topk_element.log" | head -n 24
fi
[ "${FLEX:-0}" = 1 ] || exit 0
timeout 160 "$py" benchmarks/bench_topk.py --cases moba_k3_c128 --lengths 8192,32768 --dims 64 --budget-s 120 \
    --flex-kernel-options "${FLEX_OPTIONS:-{\"BLOCK_M\": 64, \"BLOCK_N\": 64, \"num_stages\": 2}}" \
    --suffix _flex_d64 --out "$out" > "$out/bench_topk_flex_d64.log" 2>&1
echo "flex bench rc=$?"
grep -e "^| [0-9]" "$out"/bench_topk_*flex_d64*.md 2>/dev/null | head -n 6
