#!/usr/bin/env bash
# One GPU round: the stateful specs through `seqdsl train` on the chunked reference
# (SEQDSL_PATH=reference.chunked, compiled with the model as training runs it) against
# Transformer++ in the same call, to see whether seqdsl's own chunk algebra trains a family
# faster than the library kernel the planner would pick (mamba-ssm's SSD for Mamba-2, fla's
# chunk_rwkv7 for RWKV-7; their figures are in docs/training.md). Real data, 110m, 2K, batch
# 64 = 16 x 4, compile + CUDA graphs (bench_train_command.py --no-bench). Expects .gpudata/ and
# .whl/ as benchmarks/train_command_gpu_round.sh does. SPECS (default mamba2,rwkv7), STEPS.
#     bash benchmarks/chunked_stateful_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out" || exit 1
run() {  # run NAME SPECS [ENV...]: one bench_train_command.py call, its table's last lines
    local name="$1" specs="$2"
    shift 2
    env "$@" timeout "${BENCH_TIMEOUT:-300}" "$py" benchmarks/bench_train_command.py --data .gpudata/data \
        --tokenizer .gpudata/tokenizer.json --specs "$specs" --steps "${STEPS:-16}" --no-bench \
        --workdir "/tmp/chunked_round_$name" --out "$out/train_command_${name}_$date_tag.json" \
        > "$out/train_command_$name.log" 2>&1
    echo "$name rc=$?"
    grep -v -e Warn -e warn "$out/train_command_$name.log" | tail -n 4
}
run transformer transformer
run chunked "${SPECS:-mamba2,rwkv7}" SEQDSL_PATH=reference.chunked
