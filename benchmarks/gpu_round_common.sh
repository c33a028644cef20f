# Sourced by the benchmarks/*_gpu_round.sh scripts: run from the repository root, results to
# $OUT when set (the device tool's folder) else benchmarks/results, the Python in $PYTHON.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
py="${PYTHON:-python}"
date_tag="$(date -u +%Y-%m-%d)"

# mamba-ssm for this GPU only, from the sdist in .sdist/ (docs/mamba.md; about 3 minutes),
# unless it already imports.
ensure_mamba() {
    if ! "$py" -c "import mamba_ssm" 2> /dev/null; then
        timeout 300 "$py" benchmarks/build_mamba_ssm.py --sdist .sdist/mamba_ssm-*.tar.gz --install \
            > "$out/build_mamba.log" 2>&1
        echo "mamba build rc=$?"; tail -n 2 "$out/build_mamba.log"
    fi
}
