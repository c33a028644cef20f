#!/usr/bin/env bash
# The study (experiments/study.py) on a GPU machine of the device tool, whose calls last at most
# 10 minutes and carry at most 64 MiB: the data travels in two parts (.study/a, .study/b: domain
# folders and tokenizers/, made by the commands in docs/results.md, "Rerunning"), the study runs
# in the background across calls, and each call brings back the records finished so far.
#   bash experiments/study_gpu.sh stage           # carry .study/a, .whl and .sdist: data part 1, packages,
#                                                 # mamba-ssm built in the background (about 3 minutes)
#   bash experiments/study_gpu.sh start GPUS MIN  # carry .study/b: part 2, the token cache of every
#                                                 # setting with runs left, then the study in the
#                                                 # background (no run starts after MIN minutes),
#                                                 # then poll as below
#   bash experiments/study_gpu.sh poll SECONDS    # progress until SECONDS pass or the study ends
# Records (never checkpoints) come back in $OUT/study_records.tar.gz.
source "$(dirname "$0")/../benchmarks/gpu_round_common.sh"  # the repository root, install_packages
root=/tmp/study
data="$root/data"
runs="$root/runs"
out="${OUT:-$root/out}"
mkdir -p "$data" "$runs" "$out"
export SEQDSL_CACHE_DIR="$root/cache" PYTHONUNBUFFERED=1

stage() {  # merge the carried part(s) into one folder per domain
    for part in .study/*/; do cp -r "$part". "$data"/; done
    find "$data" -name "*.json.gz" -exec gunzip -f {} +  # the tokenizer travels compressed (64 MiB a call)
    du -sh "$data"/* | tr '\n' ' '; echo
}

install() {
    install_packages "$root" || exit 1
    python -c "import torch, triton, seqdsl, datasets, tokenizers; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.device_count(), 'x', torch.cuda.get_device_name(0), 'cores', __import__('os').cpu_count())"
}

poll() {
    local deadline=$((SECONDS + $1))
    while [ "$SECONDS" -lt "$deadline" ] && pgrep -f "experiments/study.py run" > /dev/null; do
        sleep 20
        [ $((SECONDS % 120)) -lt 20 ] && { date -u +%H:%M:%S; python experiments/study.py status --runs "$runs" | grep -v "not started"; }
    done
    pgrep -f "experiments/study.py run" > /dev/null || echo "the study process has ended"
    python experiments/study.py status --runs "$runs"
    tail -n 30 "$root/study.log"
    python experiments/study.py collect --runs "$runs" --dest "$root/records" > /dev/null
    for run in "$runs"/*/; do  # the unfinished too: their logs say how far they got
        mkdir -p "$root/partial/$(basename "$run")"
        cp "$run"/metrics.jsonl "$run"/train.log "$run"/study.json "$root/partial/$(basename "$run")/" 2> /dev/null
    done
    tar -czf "$out/study_records.tar.gz" -C "$root" records partial study.log $(cd "$root" && ls prepare*.log 2> /dev/null)
}

build_mamba() {  # Mamba-2 on mamba-ssm's SSD kernels, else the chunked reference (docs/mamba.md)
    local sdist=(.sdist/mamba_ssm-*.tar.gz)
    [ -e "${sdist[0]}" ] || { echo "no mamba-ssm sdist in .sdist/: Mamba-2 runs on the chunked reference"; return; }
    setsid nohup python benchmarks/build_mamba_ssm.py --sdist "${sdist[0]}" --jobs 32 --install \
        > "$root/build_mamba.log" 2>&1 < /dev/null &
    echo "building mamba-ssm in the background ($root/build_mamba.log)"
}

wait_mamba() {  # the study must not plan Mamba-2 while mamba-ssm is half installed
    local waited=0
    while pgrep -f "[b]uild_mamba_ssm.py" > /dev/null && [ "$waited" -lt 300 ]; do sleep 5; waited=$((waited + 5)); done
    [ -f "$root/build_mamba.log" ] && tail -n 2 "$root/build_mamba.log"
    python -c "import mamba_ssm; print('mamba-ssm', mamba_ssm.__version__)" 2> /dev/null || echo "mamba-ssm not importable"
}

case "${1:-}" in
    stage) stage; install; build_mamba ;;
    start)
        stage
        nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
        # the token cache of every setting with runs left, before any training reads it
        /usr/bin/time -f "prepare: %e s wall" python experiments/study.py prepare --data "$data" --setting pending \
            > "$root/prepare.log" 2>&1
        tail -n 9 "$root/prepare.log"
        wait_mamba
        setsid nohup python experiments/study.py run --data "$data" --runs "$runs" --gpus "$2" \
            --until "$(($(date +%s) + 60 * $3))" > "$root/study.log" 2>&1 < /dev/null &
        sleep 5
        poll $((540 - SECONDS)) ;;
    poll) poll "$2" ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
esac
