#!/usr/bin/env bash
# Stage the study's data for experiments/study_gpu.sh: two parts under 64 MiB each (the device
# tool's limit on what one call carries), .study/a and .study/b (ignored by git), each a tree of
# domain folders that the GPU side merges. CORPUS is a folder with the corpus's domain folders
# (web_blogs/, wikipedia/, arxiv/, stackexchange/, books/) and tokenizers/gpt-neox-20b/tokenizer.json;
# the code domain is built here from this machine's Python standard library (checked against
# experiments/code_domain.manifest.json).
#     bash experiments/stage_data.sh CORPUS
set -euo pipefail
cd "$(dirname "$0")/.."
corpus="${1:?usage: bash experiments/stage_data.sh CORPUS}"
rm -rf .study
mkdir -p .study/a/web_blogs .study/a/tokenizers/gpt-neox-20b .study/b/web_blogs
cp "$corpus"/web_blogs/blogs_train_0{0,1,2}.jsonl.zst .study/a/web_blogs/
gzip -9 -c "$corpus"/tokenizers/gpt-neox-20b/tokenizer.json > .study/a/tokenizers/gpt-neox-20b/tokenizer.json.gz  # unpacked by study_gpu.sh stage
cp "$corpus"/web_blogs/blogs_train_0{3,4}.jsonl.zst .study/b/web_blogs/
for domain in wikipedia arxiv stackexchange books; do  # their shards only (not raw dumps or test files)
    mkdir -p ".study/b/$domain"
    find "$corpus/$domain" -maxdepth 1 -name "*.jsonl.zst" -exec cp {} ".study/b/$domain/" \;
done
python experiments/build_code_domain.py --out .study/b/code
du -sh .study/a .study/b
