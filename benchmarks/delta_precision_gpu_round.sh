#!/usr/bin/env bash
# Does the delta rule's bf16 chunk products change training? (docs/training.md, "The delta rule's
# chunk products in bf16".) Two `seqdsl train specs/gated_deltanet.seq` runs of the same data,
# seed and shape (110m, 2K, batch 64 = 16 x 4, compile + CUDA graphs, STEPS optimizer steps,
# held-out loss every 50): the default plan (`triton.delta_chunk`, its chunk products in bf16)
# and SEQDSL_PATH=reference.chunked (the chunked reference, every product in float32). On two
# GPUs at once where there are two, else one after the other. Expects .gpudata/ and .whl/ as
# benchmarks/train_command_gpu_round.sh does; curves side by side on screen and in
# $OUT/delta_precision_<date>.json.
# SEED (default 0) seeds both runs (the model's initialisation and the data order).
#     STEPS=300 bash benchmarks/delta_precision_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out" || exit 1
work=/tmp/delta_precision
rm -rf "$work" && mkdir -p "$work"
export SEQDSL_CACHE_DIR="$work/cache"
steps="${STEPS:-300}"
cat > "$work/config.toml" <<TOML
preset = "110m"
seed = ${SEED:-0}
tokens = $((steps * 64 * 2048))
batch = 64
micro_batch = 16
seq_len = 2048
lr = 3e-4
warmup = 30
eval_every = 50
checkpoint_every = 0
log_every = 10
compile = true
cuda_graphs = true

[data]
source = "files"
files = ["$PWD/.gpudata/data/web_blogs"]
train_domains = ["web_blogs"]
tokenizer = "$PWD/.gpudata/tokenizer.json"
heldout = 0.01
eval_tokens = 262144
TOML
# the token cache once, so that the two runs do not build it at the same time
"$py" -m seqdsl.cli.main data prepare --quiet --config "$work/config.toml" > "$out/data_prepare.log" 2>&1
gpus="$("$py" -c 'import torch; print(torch.cuda.device_count())')"
train() {  # train NAME GPU [ENV...]
    local name=$1 gpu=$2; shift 2
    env CUDA_VISIBLE_DEVICES="$gpu" "$@" timeout "${RUN_TIMEOUT:-480}" "$py" -m seqdsl.cli.main train \
        specs/gated_deltanet.seq --config "$work/config.toml" --out "$work/$name" > "$out/$name.log" 2>&1
    echo "$name rc=$?"
}
if [ "$gpus" -ge 2 ]; then
    train bf16_products 0 & train float32_reference 1 SEQDSL_PATH=reference.chunked & wait
else
    train bf16_products 0; train float32_reference 0 SEQDSL_PATH=reference.chunked
fi
"$py" - "$work" "$out/delta_precision_seed${SEED:-0}_$date_tag.json" <<'PY'
import json, sys
from pathlib import Path
work, dest = Path(sys.argv[1]), Path(sys.argv[2])
runs = {}
for name in ("bf16_products", "float32_reference"):
    path = work / name / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    runs[name] = {"train": {r["step"]: r["loss"] for r in rows if r.get("kind") == "train"},
                  "eval": {r["step"]: r["loss"] for r in rows if r.get("kind") == "eval"},
                  "tokens_per_s": [r["tokens_per_s"] for r in rows if r.get("kind") == "train"]}
a, b = runs["bf16_products"], runs["float32_reference"]
print(f"{'step':>5} {'train bf16':>11} {'train fp32':>11} {'held-out bf16':>14} {'held-out fp32':>14}")
for step in sorted(set(a["eval"]) | set(b["eval"])):
    f = lambda d, s: f"{d[s]:.4f}" if s in d else "-"
    print(f"{step:>5} {f(a['train'], step):>11} {f(b['train'], step):>11} {f(a['eval'], step):>14} {f(b['eval'], step):>14}")
dest.write_text(json.dumps(runs, indent=2) + "\n")
print(f"wrote {dest}")
PY
