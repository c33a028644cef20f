#!/usr/bin/env bash
# The probe sweep (experiments/probe_sweep.py) on a GPU machine of the device tool, whose calls
# last at most 10 minutes: the sweep runs in the background across calls and each call brings back
# the units finished so far (docs/probe_results.md, Rerun).
#   bash experiments/probe_gpu.sh start GPUS WORKERS MINUTES   # carry .whl: the packages, then the
#                                                              # sweep on GPUS (e.g. 0,1,2,3) with WORKERS
#                                                              # processes per GPU; no unit starts after
#                                                              # MINUTES; then poll as below
#   bash experiments/probe_gpu.sh poll SECONDS                 # progress until SECONDS pass or the sweep ends
# The units come back in $OUT/probe_units.tar.gz; here: tar -xzf it into ROOT, then
# `python experiments/probe_sweep.py collect --out ROOT` and `python experiments/probe_report.py`.
# PROBE_EXTRA is appended to every `seqdsl probe` (a CPU dry run: PROBE_EXTRA="--device cpu --steps 2").
source "$(dirname "$0")/../benchmarks/gpu_round_common.sh"  # the repository root, install_packages, PYTHONPATH
root=/tmp/probe
out="${OUT:-$root/out}"
mkdir -p "$root" "$out"

poll() {
    local deadline=$((SECONDS + $1))
    while [ "$SECONDS" -lt "$deadline" ] && pgrep -f "[p]robe_sweep.py run" > /dev/null; do sleep 15; done
    pgrep -f "[p]robe_sweep.py run" > /dev/null || echo "the sweep has ended"
    "$py" experiments/probe_sweep.py status --out "$root" | tail -n 5
    tail -n 5 "$root"/sweep_*.log
    (cd "$root" && tar -czf "$out/probe_units.tar.gz" sweep_*.log $(ls -d units/*/ 2> /dev/null \
        | sed 's#/$##' | while read -r u; do ls "$u"/unit.json "$u"/probe.jsonl "$u"/probe.log 2> /dev/null; done))
}

case "${1:-}" in
    start)
        # the carried wheels and seqdsl, unless they import already (a machine warm from another job)
        "$py" -c "import lark, pydantic, seqdsl.cli.main" 2> /dev/null || install_packages "$root" || exit 1
        # shellcheck disable=SC2086  # PROBE_EXTRA is a list of arguments
        setsid nohup "$py" experiments/probe_sweep.py run --out "$root" --gpus "$2" --workers "$3" --timeout 420 \
            --until "$(($(date +%s) + 60 * $4))" ${PROBE_EXTRA:+--extra $PROBE_EXTRA} \
            > "$root/sweep_$(date +%H%M%S).log" 2>&1 < /dev/null &
        sleep 5
        poll $((540 - SECONDS)) ;;
    poll) poll "$2" ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
esac
