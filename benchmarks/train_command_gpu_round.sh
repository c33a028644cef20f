#!/usr/bin/env bash
# One GPU round for `seqdsl train` on real data (docs/training.md, "Measuring speed"), at most
# 9 minutes on an H100:
#   1. `seqdsl data prepare`: the blog shard(s) tokenized into the token cache on every core, timed
#   2. benchmarks/bench_train_command.py: `seqdsl train` (real data, 110m, 2K, batch 64 = 16 x 4,
#      compile + CUDA graphs) against bench_train.py's step of the same shape, same call
# Expects the corpus (domain folders) in .gpudata/data and GPT-NeoX's tokenizer.json in .gpudata/,
# and the Python packages the image lacks as wheels in .whl/ (docs/training.md says which).
# SPECS picks the specs (default transformer,top1_chunk_approx); STEPS the optimizer steps.
#     bash benchmarks/train_command_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out"
"$py" -c "import torch, triton, seqdsl, datasets, pyarrow; print('torch', torch.__version__, 'triton', triton.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__, 'cores', __import__('os').cpu_count())"
export SEQDSL_CACHE_DIR="$(mktemp -d)"
data="$PWD/.gpudata/data"
tok="$PWD/.gpudata/tokenizer.json"
/usr/bin/time -f "data prepare: %e s wall, %U s user" "$py" -m seqdsl.cli.main data prepare --quiet \
    --set data.source=files --set "data.files=[\"$data/web_blogs\"]" --set 'data.train_domains=["web_blogs"]' \
    --set "data.tokenizer=$tok" --set data.heldout=0.01 2>&1 | tee "$out/data_prepare.log"
timeout "${BENCH_TIMEOUT:-420}" "$py" benchmarks/bench_train_command.py --data "$data" --tokenizer "$tok" \
    --specs "${SPECS:-transformer,top1_chunk_approx}" --steps "${STEPS:-40}" \
    --out "$out/bench_train_command_$date_tag.json" > "$out/bench_train_command.log" 2>&1
echo "bench rc=$?"
grep -v Warning "$out/bench_train_command.log" | tail -n 12
cp /tmp/bench_train_command/*.log "$out/" 2>/dev/null
