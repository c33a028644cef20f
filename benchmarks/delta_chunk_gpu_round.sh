#!/usr/bin/env bash
# One GPU round for the chunked delta rule (docs/training.md, Gated DeltaNet), at most ~8 minutes:
#   1. the state-passing kernel's GPU tests (tests/kernels/test_state_pass.py, compiled, not
#      interpreted), unless TESTS=0
#   2. benchmarks/bench_recurrent.py: one Gated DeltaNet layer's mixing, forward + backward,
#      compiled with CUDA graphs (as `seqdsl train` runs it), batch 16 x 2048, TF32: the chunked
#      reference (its state passing a loop over the chunks) against `triton.delta_chunk` (the
#      same with the state passing in one kernel); EARLIER=<names> adds the algorithms the
#      benchmark keeps (solve, scan, scan+solve: bench_recurrent.py's docstring)
#   3. with PROFILE=1, benchmarks/profile_train.py: the 110m Gated DeltaNet training step's kernels
#      (batch 16)
# Results (JSON, logs) go to $OUT when set, else benchmarks/results.
#     bash benchmarks/delta_chunk_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out" || exit 1
if [ "${TESTS:-1}" = 1 ]; then
    timeout 240 "$py" -m pytest -q -m gpu tests/kernels/test_state_pass.py -p no:cacheprovider \
        > "$out/gpu_state_pass_tests.log" 2>&1
    echo "state-pass GPU tests rc=$?"; tail -n 3 "$out/gpu_state_pass_tests.log"
fi
earlier=()
[ -n "${EARLIER:-}" ] && earlier=(--earlier "$EARLIER")  # e.g. EARLIER=solve,scan
timeout 300 "$py" benchmarks/bench_recurrent.py --specs "${SPECS:-gated_deltanet}" --batch 16 --tf32 \
    "${earlier[@]}" --cuda-graphs --repeats 10 --out "$out/bench_recurrent_$date_tag.json" 2>&1 \
    | grep -v -e Warning -e "check(" | tee "$out/bench_recurrent.log" | tail -n 8
[ "${PROFILE:-0}" = 1 ] || exit 0
timeout 200 "$py" benchmarks/profile_train.py --spec gated_deltanet --batch 16 --variants graphs \
    --out "$out/profile_train_gated_deltanet.json" \
    > "$out/profile_train.log" 2>&1
echo "profile rc=$?"
grep -A 24 "^profile of" "$out/profile_train.log" | head -n 26
