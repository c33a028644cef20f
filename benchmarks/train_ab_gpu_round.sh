#!/usr/bin/env bash
# `seqdsl train` with a change against its predecessor in one GPU call: files that differ are
# taken back to a revision for the "before" leg, so both legs run on the same machine, data and
# caches. Prepare here (git show writes the old files into .ab/train/, ignored by git), then run
# with the device tool carrying .whl, .gpudata and .ab (and .mambawhl with MAMBA=1):
#     bash benchmarks/train_ab_gpu_round.sh prepare REV seqdsl/lower/backends/fla.py
#     SPECS_AFTER=transformer,rwkv7 SPECS_BEFORE=rwkv7 bash benchmarks/train_ab_gpu_round.sh
# "after" (the working tree) runs first, then "before" with the old files and the caches "after"
# filled: compilation is not compared, unless COLD=1 gives every run empty caches of its own
# (--cold-caches: time to first step as on a fresh machine, for both legs).
# bench_train_command.py as in benchmarks/startup_gpu_round.sh; results to $OUT/{after,before}.
if [ "${1:-}" = prepare ]; then
    set -eu
    rev="$2"; shift 2
    cd "$(dirname "$0")/.."
    rm -rf .ab/train && mkdir -p .ab/train
    for path in "$@"; do
        mkdir -p ".ab/train/$(dirname "$path")"
        git show "$rev:$path" > ".ab/train/$path"
        echo "$path" >> .ab/train/FILES
    done
    echo "$rev" > .ab/train/REVISION
    echo "prepared $(wc -l < .ab/train/FILES) file(s) of $rev in .ab/train"
    exit 0
fi
source "$(dirname "$0")/gpu_round_common.sh"
[ -e .ab/train/REVISION ] || { echo "no .ab/train: run 'bash $0 prepare REV FILE...' first"; exit 2; }
install_packages "$out" || exit 1
[ "${MAMBA:-0}" = 1 ] && ensure_mamba  # mamba-ssm for mamba2 (carry .mambawhl: gpu_round_common.sh)
mkdir -p /tmp/ab_after
while read -r path; do cp "$path" "/tmp/ab_after/$(echo "$path" | tr / _)"; done < .ab/train/FILES
for side in after before; do
    specs="${SPECS_AFTER:-transformer,rwkv7}"
    if [ "$side" = before ]; then
        specs="${SPECS_BEFORE:-rwkv7}"
        while read -r path; do cp ".ab/train/$path" "$path"; done < .ab/train/FILES
    fi
    mkdir -p "$out/$side"
    timeout "${BENCH_TIMEOUT:-280}" "$py" benchmarks/bench_train_command.py --data .gpudata/data \
        --tokenizer .gpudata/tokenizer.json --specs "$specs" --steps "${STEPS:-12}" --no-bench $([ "${COLD:-0}" = 1 ] && echo --cold-caches) \
        --workdir "/tmp/ab_$side" --out "$out/$side/train_ab.json" > "$out/$side/train_ab.log" 2>&1
    rc=$?
    rev="working tree"; [ "$side" = before ] && rev="$(cat .ab/train/REVISION)"
    echo "$side ($rev) rc=$rc"
    grep -v -i warn "$out/$side/train_ab.log" | tail -n 4
done
while read -r path; do cp "/tmp/ab_after/$(echo "$path" | tr / _)" "$path"; done < .ab/train/FILES
