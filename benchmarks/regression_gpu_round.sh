#!/usr/bin/env bash
# After a change to the lowering, the kernels or the run layer: every GPU test, then `seqdsl train`
# against bench_train.py and the kernel benchmarks, on the GPUs in GPUS (default: all), each phase
# capped at CAP seconds (default 400):
#   tests    pytest -m gpu tests/kernels tests/lower, the test ids dealt round-robin over GPUS
#            (one pytest per GPU; the mamba-ssm tests skip unless it imports; TESTS_K narrows
#            them with -k); a test still running after TEST_TIMEOUT seconds (default 150) fails
#            and its GPU goes on with the next (SEQDSL_TEST_TIMEOUT, tests/conftest.py)
#   train    bench_train_command.py transformer, then linear_attention (fla's odd-width padding):
#            `seqdsl train` on real text vs its benchmark, on the first GPU of GPUS
#   kernels  bench_top1.py (8K, 32K; D 64, 128) and bench_topk.py (one run per case, --check
#            first), on the last GPU of GPUS
# Phases in STEPS (default "tests train"); train and kernels run at the same time when their GPUs
# differ. Installs the wheels carried in .whl/ and seqdsl (gpu_round_common.sh); for train, DATA
# holds web_blogs/ (one shard is used) and tokenizers/gpt-neox-20b/tokenizer.json.
#     DATA=/tmp/study/data bash benchmarks/regression_gpu_round.sh
#     GPUS=3 STEPS="train kernels" TESTS_K=mamba DATA=/tmp/study/data bash benchmarks/regression_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
cap="${CAP:-400}"
steps="${STEPS:-tests train}"
IFS=, read -r -a gpus <<< "${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd,)}"
work="$(mktemp -d)"
export SEQDSL_CACHE_DIR="$work/cache"
install_packages "$out" || exit 1
has() { [[ " $steps " == *" $1 "* ]]; }

run_tests() {
    "$py" -m pytest --collect-only -q -p no:cacheprovider -m gpu ${TESTS_K:+-k "$TESTS_K"} tests/kernels tests/lower \
        | grep "::" > "$work/ids"
    echo "$(wc -l < "$work/ids") GPU tests over ${#gpus[@]} GPU(s)"
    local i
    for i in "${!gpus[@]}"; do
        awk -v n="${#gpus[@]}" -v i="$i" '(NR - 1) % n == i' "$work/ids" > "$work/ids_$i"
        # every line stamped with the time: a log cut by the cap still says what took long
        SEQDSL_TEST_TIMEOUT="${TEST_TIMEOUT:-150}" CUDA_VISIBLE_DEVICES="${gpus[$i]}" timeout "$cap" "$py" -m pytest -v -s -p no:cacheprovider --durations=15 \
            $(cat "$work/ids_$i") 2>&1 | while IFS= read -r line || [ -n "$line" ]; do printf '%(%T)T %s\n' -1 "$line"; done \
            > "$out/gpu_tests_$i.log" &
    done
    wait
    for i in "${!gpus[@]}"; do
        echo "== GPU ${gpus[$i]}: $(wc -l < "$work/ids_$i") tests"
        grep -e FAILED -e ERROR -e XFAIL -e " passed" -e " failed" -e "no tests ran" -e "still running after" \
            "$out/gpu_tests_$i.log" | tail -n 12
        grep -q -e " passed" -e " failed" "$out/gpu_tests_$i.log" || { echo "cut by the cap at:"; tail -n 2 "$out/gpu_tests_$i.log"; }
    done
}

run_train() {
    mkdir -p "$work/data/web_blogs"
    ln -sf "$(ls "$DATA"/web_blogs/* | head -n 1)" "$work/data/web_blogs/"
    local spec
    for spec in transformer linear_attention; do
        CUDA_VISIBLE_DEVICES="${gpus[0]}" timeout "$cap" "$py" benchmarks/bench_train_command.py --data "$work/data" \
            --tokenizer "$DATA/tokenizers/gpt-neox-20b/tokenizer.json" --specs "$spec" --steps 30 --bench-steps 20 \
            --workdir "$work/$spec" --out "$out/bench_train_command_${spec}_$date_tag.json" \
            > "$out/bench_train_command_$spec.log" 2>&1
        echo "== seqdsl train vs bench_train.py: $spec"
        grep -v Warning "$out/bench_train_command_$spec.log" | tail -n 6
        grep -h -o '"paths".\{0,200\}' "$work/$spec"/run_*/metrics.jsonl 2> /dev/null | head -n 2
    done
}

run_kernels() {
    local gpu="${gpus[-1]}" case
    CUDA_VISIBLE_DEVICES="$gpu" timeout "$cap" "$py" benchmarks/bench_top1.py --lengths 8192,32768 --dims 64,128 \
        --flex-max-t 0 --budget-s 90 --out "$out" > "$out/bench_top1.log" 2>&1
    tail -n 30 "$out/bench_top1.log"
    for case in moba_k3_c128 moba_k8_c64 nsa_k16_c64; do
        CUDA_VISIBLE_DEVICES="$gpu" timeout "$cap" "$py" benchmarks/bench_topk.py --cases "$case" --check \
            --budget-s 150 --out "$out" > "$out/bench_topk_$case.log" 2>&1
        tail -n 30 "$out/bench_topk_$case.log"
    done
}

nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1
has tests && run_tests
if has train && has kernels && [ "${gpus[0]}" != "${gpus[-1]}" ]; then
    run_kernels > "$work/kernels.out" 2>&1 &
    run_train
    wait
    cat "$work/kernels.out"
else
    has train && run_train
    has kernels && run_kernels
fi
