#!/usr/bin/env bash
# One GPU round tuning the Top-1 kernels' tile sizes (docs/kernels.md: "Tuning tile sizes"), at most
# 9 minutes on an H100: benchmarks/sweep_top1_tiles.py over the sites that limit the missed speed
# targets (SITES, default: element's bwd_dkdv and forward, the chunk backward), T = 8K and 32K,
# D 64, every setting checked against the default's outputs; KERNELS narrows it (e.g. chunk.gate is
# Approx's: KERNELS=top1_chunk_approx SITES=chunk.gate), WHERE keeps the candidates with given
# fields (e.g. WHERE=FUSE_DQ=1). Results go to $OUT when set.
#     bash benchmarks/top1_tiles_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out"
export SEQDSL_CACHE_DIR="$(mktemp -d)"
timeout 520 "$py" benchmarks/sweep_top1_tiles.py --sites "${SITES:-element.bwd_dkdv,element.fwd,chunk.bwd}" \
    --kernels "${KERNELS:-top1_element,top1_chunk_exact,top1_chunk_approx}" --where "${WHERE:-}" \
    --lengths "${LENGTHS:-32768,8192}" --dims "${DIMS:-64}" --budget-s "${BUDGET_S:-450}" --out "$out" \
    > "$out/sweep_top1_tiles.log" 2>&1
echo "sweep rc=$?"; sed -n '/^Best per site/,$p' "$out"/sweep_top1_tiles_*.md 2>/dev/null
