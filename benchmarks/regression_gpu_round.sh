#!/usr/bin/env bash
# After a change to the lowering, the kernels or the run layer: every GPU test and `seqdsl train`
# against bench_train.py, as four jobs at once, one per GPU (jobs share the GPUs when there are
# fewer), capped at CAP seconds (default 240):
#   GPU 0: pytest -m gpu tests/kernels                    the generated kernels against float64
#   GPU 1: pytest -m gpu tests/lower                      every path against the reference (the
#                                                         mamba-ssm tests skip unless it imports)
#   GPU 2: bench_train_command.py transformer             `seqdsl train` on real text vs its benchmark
#   GPU 3: bench_train_command.py linear_attention        the same for fla's odd-width padding
# Needs the packages installed (experiments/study_gpu.sh stage does it) and DATA holding
# web_blogs/ (one shard is used) and tokenizers/gpt-neox-20b/tokenizer.json.
#     DATA=/tmp/study/data bash benchmarks/regression_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
cap="${CAP:-240}"
gpus="$(nvidia-smi -L | wc -l)"
work="$(mktemp -d)"
export SEQDSL_CACHE_DIR="$work/cache"
mkdir -p "$work/data/web_blogs"
first_shard="$(ls "$DATA"/web_blogs/* | head -n 1)"
ln -s "$first_shard" "$work/data/web_blogs/"
tok="$DATA/tokenizers/gpt-neox-20b/tokenizer.json"

on_gpu() {  # on_gpu INDEX LOG COMMAND...: one job in the background on GPU INDEX mod the GPU count
    local index=$(($1 % gpus)) log="$out/$2"
    shift 2
    CUDA_VISIBLE_DEVICES="$index" timeout "$cap" "$@" > "$log" 2>&1 &
}
on_gpu 0 gpu_kernel_tests.log "$py" -m pytest -v -s -p no:cacheprovider -m gpu tests/kernels
on_gpu 1 gpu_lower_tests.log "$py" -m pytest -v -p no:cacheprovider -m gpu tests/lower
for i in 2 3; do
    spec=$([ "$i" = 2 ] && echo transformer || echo linear_attention)
    on_gpu "$i" "bench_train_command_$spec.log" "$py" benchmarks/bench_train_command.py --data "$work/data" \
        --tokenizer "$tok" --specs "$spec" --steps 30 --bench-steps 20 --workdir "$work/$spec" \
        --out "$out/bench_train_command_${spec}_$date_tag.json"
done
wait
nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1
for log in gpu_kernel_tests gpu_lower_tests; do
    echo "== $log"; grep -e FAILED -e ERROR -e " passed" -e " failed" -e "no tests ran" "$out/$log.log" | tail -n 8
done
for spec in transformer linear_attention; do
    echo "== seqdsl train vs bench_train.py: $spec"
    grep -v Warning "$out/bench_train_command_$spec.log" | tail -n 6
    cp "$work/$spec"/*.log "$out/" 2> /dev/null
    grep -h -o '"paths".\{0,200\}' "$work/$spec"/run_*/metrics.jsonl 2> /dev/null | head -n 2
done
