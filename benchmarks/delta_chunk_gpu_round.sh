#!/usr/bin/env bash
# One GPU round for the chunked delta rule's algorithms (docs/training.md, Gated DeltaNet), at
# most ~8 minutes:
#   1. benchmarks/bench_recurrent.py --earlier: one Gated DeltaNet layer's mixing, forward +
#      backward, compiled with CUDA graphs (as `seqdsl train` runs it), batch 16 x 2048, TF32:
#      the reference as it is against its earlier state passing (a loop over the chunks) and
#      chunk inverse (one triangular solve), each and both
#   2. benchmarks/profile_train.py: the 110m Gated DeltaNet training step's kernels (batch 16)
# Results (JSON, logs) go to $OUT when set, else benchmarks/results.
#     bash benchmarks/delta_chunk_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out" || exit 1
timeout 300 "$py" benchmarks/bench_recurrent.py --specs "${SPECS:-gated_deltanet}" --batch 16 --tf32 --earlier \
    --cuda-graphs --repeats 10 --out "$out/bench_recurrent_earlier_$date_tag.json" 2>&1 \
    | grep -v -e Warning -e "check(" | tee "$out/bench_recurrent_earlier.log" | tail -n 8
[ "${PROFILE:-1}" = 1 ] || exit 0
timeout 200 "$py" benchmarks/profile_train.py --spec gated_deltanet --batch 16 --variants graphs \
    --out "$out/profile_train_gated_deltanet.json" \
    > "$out/profile_train.log" 2>&1
echo "profile rc=$?"
grep -A 24 "^profile of" "$out/profile_train.log" | head -n 26
