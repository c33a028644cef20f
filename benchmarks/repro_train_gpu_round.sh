#!/usr/bin/env bash
# Issue 22's table on a 4-GPU host of the device tool: every reproduction spec through `seqdsl
# train` itself (real text, 110m, 2K, batch 64 = 16 x 4, compile + CUDA graphs), each queue on its
# own GPU, in the background across calls (a call lasts at most 10 minutes):
#   GPU 0  bench_train_command.py transformer,top1_chunk_approx: the command against its benchmark
#   GPU 1  the GPU tests of the generated kernels and the Top-1 paths, then bench_top1 and bench_topk
#   GPU 2  --no-bench transformer,mamba2,rwkv7
# Every command queue prints Triton's autotuning (TRITON_PRINT_AUTOTUNING) into its runs' logs.
#   GPU 3  --no-bench transformer,gated_deltanet,linear_attention,window_256,top1_element,top1_chunk_exact
# Each --no-bench queue times its own Transformer++ first, for the ratios. QUEUES replaces the
# command queues, one per line "GPU NAME ARGS..." (ARGS for bench_train_command.py; a NAME starting
# with "mamba" waits for mamba-ssm's build first); KERNELS=0 leaves the kernel queue out. Run after
# `bash experiments/study_gpu.sh stage` (data in /tmp/study/data, wheels, mamba-ssm building):
#   bash benchmarks/repro_train_gpu_round.sh start
#   bash benchmarks/repro_train_gpu_round.sh poll SECONDS   # until SECONDS pass or every queue ends
# Logs and JSON (in /tmp/repro/out) come back as $OUT/repro_out.tar.gz.
source "$(dirname "$0")/gpu_round_common.sh"
root=/tmp/repro
data=/tmp/study/data
mkdir -p "$root/out" "$root/data/web_blogs"
export SEQDSL_CACHE_DIR="$root/cache" PYTHONUNBUFFERED=1
tok="$data/tokenizers/gpt-neox-20b/tokenizer.json"
DEFAULT_QUEUES="0 bench --specs transformer,top1_chunk_approx
2 mamba_stateful --no-bench --specs transformer,mamba2,rwkv7
3 rest --no-bench --specs transformer,gated_deltanet,linear_attention,window_256,top1_element,top1_chunk_exact"

command_queue() {  # command_queue GPU NAME [--no-bench] SPECS
    local gpu="$1" name="$2"; shift 2
    CUDA_VISIBLE_DEVICES="$gpu" "$py" benchmarks/bench_train_command.py --data "$root/data" --tokenizer "$tok" \
        --steps 30 --bench-steps 20 --workdir "$root/work_$name" "$@" \
        --out "$root/out/bench_train_command_${name}_$date_tag.json" > "$root/out/queue_$name.log" 2>&1
    for f in "$root/work_$name"/*.log; do cp "$f" "$root/out/${name}_$(basename "$f")"; done 2> /dev/null
}

kernel_queue() {  # the kernel change of 55f5f11 (decode reads the grouped cache) on a GPU, then speed
    local gpu="$1"
    CUDA_VISIBLE_DEVICES="$gpu" SEQDSL_TEST_TIMEOUT=150 timeout 360 "$py" -m pytest -v -p no:cacheprovider -m gpu \
        tests/kernels tests/lower/test_top1_ref.py tests/lower/test_gpu_paths.py -k "top1 or kernels" \
        > "$root/out/gpu_kernel_tests.log" 2>&1
    CUDA_VISIBLE_DEVICES="$gpu" timeout 400 "$py" benchmarks/bench_top1.py --lengths 8192,32768 --dims 64,128 \
        --flex-max-t 0 --budget-s 90 --out "$root/out" > "$root/out/bench_top1.log" 2>&1
    local case
    for case in moba_k3_c128 moba_k8_c64 nsa_k16_c64; do
        CUDA_VISIBLE_DEVICES="$gpu" timeout 200 "$py" benchmarks/bench_topk.py --cases "$case" --check \
            --budget-s 150 --out "$root/out" > "$root/out/bench_topk_$case.log" 2>&1
    done
}

wait_mamba() {  # Mamba-2 must not be planned while mamba-ssm is half installed
    local waited=0
    while pgrep -f "[b]uild_mamba_ssm.py" > /dev/null && [ "$waited" -lt 400 ]; do sleep 5; waited=$((waited + 5)); done
    "$py" -c "import mamba_ssm; print('mamba-ssm', mamba_ssm.__version__)" > "$root/out/mamba_import.log" 2>&1
}

start() {
    ln -sf "$data/web_blogs/blogs_train_00.jsonl.zst" "$root/data/web_blogs/"
    for d in books arxiv stackexchange; do [ -d "$data/$d" ] && ln -sfn "$data/$d" "$root/data/$d"; done
    nvidia-smi --query-gpu=index,name --format=csv,noheader
    # the shard's token cache once, before four processes want it
    /usr/bin/time -f "data prepare: %e s wall" "$py" -m seqdsl.cli.main data prepare --quiet \
        --set data.source=files --set "data.files=[\"$root/data/web_blogs\"]" --set 'data.train_domains=["web_blogs"]' \
        --set "data.tokenizer=$tok" --set data.heldout=0.01 > "$root/out/data_prepare.log" 2>&1
    tail -n 2 "$root/out/data_prepare.log"
    [ "${KERNELS:-1}" = 1 ] && setsid nohup bash -c "$(declare -f kernel_queue); root=$root py=$py; kernel_queue 1" \
        > /dev/null 2>&1 < /dev/null &
    local gpu name args
    while read -r gpu name args; do
        [ -n "$gpu" ] || continue
        local first=":"
        [[ "$name" == mamba* ]] && first="wait_mamba"
        setsid nohup bash -c "$(declare -f command_queue wait_mamba); root=$root tok=$tok py=$py date_tag=$date_tag; \
            $first; TRITON_PRINT_AUTOTUNING=1 command_queue $gpu $name $args" > /dev/null 2>&1 < /dev/null &
    done <<< "${QUEUES:-$DEFAULT_QUEUES}"
    sleep 2
}

running() { pgrep -f "[b]ench_train_command.py|[b]ench_top1.py|[b]ench_topk.py|[p]ytest -v -p no:cacheprovider" > /dev/null; }

poll() {
    local deadline=$((SECONDS + $1))
    while [ "$SECONDS" -lt "$deadline" ] && running; do sleep 10; done
    running || echo "every queue has ended"
    for f in "$root"/out/queue_*.log; do echo "== $f"; grep -v Warning "$f" | tail -n 8; done
    grep -h -e " passed" -e " failed" -e FAILED "$root/out/gpu_kernel_tests.log" 2> /dev/null | tail -n 5
    tail -n 12 "$root"/out/bench_top1.log 2> /dev/null
    tar -czf "$out/repro_out.tar.gz" -C "$root" out
}

case "${1:-}" in
    start) start; poll "${2:-480}" ;;
    poll) poll "$2" ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
esac
