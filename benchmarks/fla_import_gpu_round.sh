#!/usr/bin/env bash
# Where `import fla` spends its time on a GPU machine (22-24 s on an H100 on 2026-11-28, most of
# RWKV-7's planning before its self-checks): the whole import, `python -X importtime`'s slowest
# modules (cumulative microseconds), and seqdsl's import_ops (fla's ops without its layers and
# models) against the whole import (bench_fla_import.py). Results to $OUT or benchmarks/results.
#     bash benchmarks/fla_import_gpu_round.sh
source "$(dirname "$0")/gpu_round_common.sh"
install_packages "$out" || exit 1
"$py" -X importtime -c "import fla" 2> "$out/importtime_fla.txt"
echo "slowest imports (cumulative us | module):"
sort -t'|' -k2 -n "$out/importtime_fla.txt" | tail -n 25 | cut -d'|' -f2,3
"$py" -c "import time; t = time.time(); import fla; print(f'import fla: {time.time() - t:.1f} s')"
# seqdsl's own import of the ops (without fla's layers and models), against the whole package,
# each in fresh interpreters, alternating (benchmarks/bench_fla_import.py)
"$py" benchmarks/bench_fla_import.py --repeats "${REPEATS:-3}" --out "$out"
