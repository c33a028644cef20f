#!/usr/bin/env bash
# One GPU round for the generated top-k kernels (docs/kernels.md, "Top-k chunk selection"), what
# the 2026-11-27 sessions left unmeasured, at most ~9 minutes (BENCH=0 skips step 2, TRAIN=0 step 3):
#   1. pytest -m gpu: the top-k chunk kernels with the STE gate and grad = none, MoBA's 512-token
#      chunks in tiles, the top-k element kernels (k 16 and 64), grouped and MoBA specs at
#      T ~ 2K against float64, decoding compiled (<= TEST_TIMEOUT, default 240 s)
#   2. benchmarks/bench_topk.py, one run per case (MoBA k 3 of 128, k 8 of 64, NSA k 16 of 64 with
#      fla's parallel_nsa), 8K / 32K / 64K, D 64 and 128, with --check (<= BENCH_BUDGET s each,
#      default 100); CASES names others (bench_topk.py --help lists them), space-separated;
#      LENGTHS, DIMS (comma-separated) and COLUMNS (bench_topk.py --columns) narrow the table
#   3. seqdsl train itself, Transformer++ against MoBA at 2K and 8K (SEQS; bench_train_command.py
#      --no-bench; needs the corpus in DATA (default .gpudata/data) and TOKENIZER); TRAIN=0 skips it
# Results (JSON, markdown, logs) go to $OUT when set (the device tool's folder), else benchmarks/results.
#     bash benchmarks/topk_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
# the device tool returns a few files only: the logs go back as one archive, however the round ends
trap '(cd "$out" && ls ./*.log > /dev/null 2>&1 && tar czf logs.tgz ./*.log && rm -f ./*.log)' EXIT
install_packages "$out" || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout "${TEST_TIMEOUT:-240}" "$py" -m pytest -q -s -p no:cacheprovider -m gpu tests/kernels/test_topk_kernels.py \
    tests/kernels/test_topk_element_kernels.py tests/kernels/test_top1_kernels.py \
    -k "${TEST_K:-topk or long_chunks or (large_shapes and (moba or gqa))}" > "$out/gpu_topk_tests.log" 2>&1
echo "gpu tests rc=$?"
grep -e "D=" -e FAILED -e ERROR -e "passed" -e "failed" "$out/gpu_topk_tests.log" | tail -n 12
for case in $([ "${BENCH:-1}" = 1 ] && echo ${CASES:-moba_k3_c128 moba_k8_c64 nsa_k16_c64}); do
    budget="${BENCH_BUDGET:-100}"
    timeout $((budget + 60)) "$py" benchmarks/bench_topk.py --cases "$case" --lengths "${LENGTHS:-8192,32768,65536}" \
        --dims "${DIMS:-64,128}" ${COLUMNS:+--columns "$COLUMNS"} --check --budget-s "$budget" --out "$out" \
        > "$out/bench_topk_$case.log" 2>&1
    echo "bench $case rc=$?"
    grep -e "^| [0-9]" "$out"/bench_topk_*"$case"*.md 2>/dev/null
done
[ "${TRAIN:-1}" = 1 ] || exit 0
for seq in ${SEQS:-2048 8192}; do
    timeout 300 "$py" benchmarks/bench_train_command.py --data "${DATA:-.gpudata/data}" \
        --tokenizer "${TOKENIZER:-.gpudata/tokenizer.json}" --no-bench --steps 16 --seq "$seq" \
        --batch $((64 * 2048 / seq)) --micro-batch $((16 * 2048 / seq)) --eval-tokens 16384 \
        --specs transformer,moba --out "$out/train_command_moba_$seq.json" > "$out/train_command_moba_$seq.log" 2>&1
    echo "train seq $seq rc=$?"
    grep -v -e Warn -e warn "$out/train_command_moba_$seq.log" | tail -n 3
done
