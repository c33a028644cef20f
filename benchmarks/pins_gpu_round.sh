#!/usr/bin/env bash
# One GPU round for the tunings Triton does not keep (seqdsl/lower/backends/autotune_pins.py),
# at most ~9 minutes on an H100:
#   1. mamba-ssm from the carried wheel (.mambawhl/) or built (gpu_round_common.sh)
#   2. benchmarks/dump_autotune_seed.py --specs mamba2: one training step in an empty Triton
#      cache records this GPU's autotuning files and the in-memory choices (pins.json); both
#      come back in $OUT/autotune_seed/ (copy them into seqdsl/lower/backends/autotune-seed/)
#   3. time to first step with every cache cold, Transformer++ and Mamba-2 (SPECS), the new
#      records in place (bench_train_command.py --no-bench --cold-caches, as startup_gpu_round.sh)
# Expects .whl/, .gpudata/ and .mambawhl/ (or .sdist/).
#     bash benchmarks/pins_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out" || exit 1
ensure_mamba
seed_dir=seqdsl/lower/backends/autotune-seed
before="$(ls "$seed_dir" | wc -l)"
timeout 240 "$py" benchmarks/dump_autotune_seed.py --specs "${DUMP_SPECS:-mamba2}" > "$out/dump.log" 2>&1
echo "dump rc=$? (seed folders before: $before, after: $(ls "$seed_dir" | wc -l))"; tail -n 2 "$out/dump.log"
mkdir -p "$out/autotune_seed" && cp -r "$seed_dir"/. "$out/autotune_seed/"
(cd "$out" && tar czf autotune_seed.tgz autotune_seed && rm -rf autotune_seed)
timeout "${BENCH_TIMEOUT:-330}" "$py" benchmarks/bench_train_command.py --data .gpudata/data \
    --tokenizer .gpudata/tokenizer.json --specs "${SPECS:-transformer,mamba2}" --steps "${STEPS:-12}" \
    --no-bench --cold-caches --workdir /tmp/pins_round --out "$out/startup_pins_$date_tag.json" > "$out/startup.log" 2>&1
echo "bench rc=$?"
grep -v Warning "$out/startup.log" | tail -n 6
