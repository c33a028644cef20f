#!/usr/bin/env bash
# One GPU round for issue 22's time to first step: `seqdsl train` (real data, 110m, 2K, batch 64 =
# 16 x 4, compile + CUDA graphs) per spec, each with empty caches of its own (Triton, inductor,
# CUDA JIT, seqdsl: bench_train_command.py --cold-caches), so every spec starts as on a fresh
# machine; the first_step event's split (model, paths, data beside them, the step) per spec.
# Expects .gpudata/ and .whl/ as benchmarks/train_command_gpu_round.sh does; MAMBA=1 builds or
# installs mamba-ssm first (for mamba2; docs/mamba.md). SPECS, STEPS as there. PROFILE=1 runs each
# command's main thread under cProfile (bench_train_command.py --profile-startup; the listings
# come back in startup_logs.tgz).
#     SPECS=transformer,rwkv7 bash benchmarks/startup_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out" || exit 1
[ "${MAMBA:-0}" = 1 ] && ensure_mamba
"$py" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cores', __import__('os').cpu_count())"
timeout "${BENCH_TIMEOUT:-480}" "$py" benchmarks/bench_train_command.py --data .gpudata/data \
    --tokenizer .gpudata/tokenizer.json --specs "${SPECS:-transformer,rwkv7,gated_deltanet}" \
    --steps "${STEPS:-12}" --no-bench --cold-caches --workdir /tmp/startup_round ${PROFILE:+--profile-startup} \
    --out "$out/startup_$date_tag.json" > "$out/startup.log" 2>&1
echo "bench rc=$?"
grep -v Warning "$out/startup.log" | tail -n 12
tar czf "$out/startup_logs.tgz" -C /tmp/startup_round $(cd /tmp/startup_round && ls *.log *_profile.txt 2>/dev/null) 2>/dev/null
