#!/usr/bin/env bash
# One GPU round: do the shipped autotuning results (seqdsl/lower/backends/autotune_seed.py,
# recorded on the GPU named in autotune-seed/README.md) cost speed on this GPU? `seqdsl train`
# (real data, 110m, 2K, 64 = 16 x 4, compile + CUDA graphs, every cache cold) of SPEC with the
# shipped tunings, Transformer++ beside it in the same call, then SPEC again with
# SEQDSL_AUTOTUNE_SEED=0 (this GPU autotunes every kernel itself: minutes for RWKV-7).
# Expects .gpudata/ and .whl/ as benchmarks/startup_gpu_round.sh does.
#     SPEC=rwkv7 bash benchmarks/seed_ab_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out" || exit 1
spec="${SPEC:-rwkv7}"
"$py" -c "import torch, triton; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)"
leg() {  # leg NAME SPECS [ENV=VALUE]: one bench_train_command.py run, cold caches, no benchmark half
    local name="$1" specs="$2"; shift 2
    env "$@" timeout "${LEG_TIMEOUT:-330}" "$py" benchmarks/bench_train_command.py --data .gpudata/data \
        --tokenizer .gpudata/tokenizer.json --specs "$specs" --steps "${STEPS:-12}" --no-bench --cold-caches \
        --workdir "/tmp/seed_ab_$name" --out "$out/seed_ab_${name}_$date_tag.json" > "$out/seed_ab_$name.log" 2>&1
    echo "$name rc=$?"
    grep -v -i warn "$out/seed_ab_$name.log" | tail -n 6
}
leg shipped "transformer,$spec"
leg own "$spec" SEQDSL_AUTOTUNE_SEED=0
