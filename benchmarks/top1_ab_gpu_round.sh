#!/usr/bin/env bash
# One GPU round timing a Top-1 template change against its predecessor, at most 7 minutes on an
# H100: benchmarks/bench_top1.py twice in one call, T = 8K and 32K (LENGTHS), D 64 and 128, no Flex,
# each with fresh caches: "before" loads the kernels benchmarks/top1_ab_prepare.sh rendered into
# .ab/before (SEQDSL_KERNEL_OVERRIDE), "after" renders the working tree's. Results to
# $OUT/{before,after} (the device tool's folder) or benchmarks/results/ab.
#     bash benchmarks/top1_ab_prepare.sh REV && bash benchmarks/top1_ab_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
[ -e .ab/before/REVISION ] || { echo "no .ab/before: run benchmarks/top1_ab_prepare.sh REV first"; exit 2; }
install_packages "$out"
for side in before after; do
    mkdir -p "$out/$side"
    export SEQDSL_CACHE_DIR="$(mktemp -d)"
    if [ "$side" = before ]; then export SEQDSL_KERNEL_OVERRIDE="$PWD/.ab/before"; else unset SEQDSL_KERNEL_OVERRIDE; fi
    timeout "${BENCH_TIMEOUT:-190}" "$py" benchmarks/bench_top1.py --lengths "${LENGTHS:-8192,32768}" --dims "${DIMS:-64,128}" \
        --flex-max-t 0 --budget-s "${BUDGET_S:-150}" --out "$out/$side" > "$out/$side/bench_top1.log" 2>&1
    rc=$?
    rev="working tree"; [ "$side" = before ] && rev="$(cat .ab/before/REVISION)"
    echo "$side ($rev) rc=$rc"
    grep -h "^| top1\|^| sdpa_cudnn" "$out/$side"/bench_top1_*.md 2>/dev/null | cut -d'|' -f2-6,10-11
done
