# Sourced by the benchmarks/*_gpu_round.sh scripts: run from the repository root, results to
# $OUT when set (the device tool's folder) else benchmarks/results, the Python in $PYTHON.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
py="${PYTHON:-python}"
date_tag="$(date -u +%Y-%m-%d)"
# the wheels carried in .whl/ (lark, pydantic, datasets, fla: docs/training.md, "What a GPU round
# carries", says how to download them) go to /tmp/site,
# which every round script puts on the path: a later call on the same machine finds them
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"

install_packages() {  # install_packages LOGDIR: the carried wheels, then seqdsl in place; 1 on failure
    if ls .whl/*.whl > /dev/null 2>&1; then
        "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl > "$1/wheels.log" 2>&1 || { echo "wheel install failed:"; tail -n 5 "$1/wheels.log"; return 1; }
    fi
    # an editable install also maps seqdsl.kernels and seqdsl.codegen, which live at the top of the repo
    "$py" -m pip install -q --no-deps --no-build-isolation -e . > "$1/install.log" 2>&1 \
        || { echo "install failed:"; tail -n 5 "$1/install.log"; return 1; }
}

# mamba-ssm for this GPU only: a wheel built by an earlier round and carried back in .mambawhl/
# (split in parts under 16 MiB, the device tool's limit on a returned file), else built from the
# sdist in .sdist/ (docs/mamba.md; about 3 minutes), unless it already imports. With
# SPLIT_MAMBA_WHEEL=1 a fresh build is split into $out for the next round to carry.
ensure_mamba() {
    "$py" -c "import mamba_ssm" 2> /dev/null && return
    local parts=(.mambawhl/*.whl.part-*)
    if [ -e "${parts[0]}" ]; then
        local wheel="/tmp/$(basename "${parts[0]%.part-*}")"
        cat "${parts[@]}" > "$wheel"
        "$py" -m pip install -q --no-deps "$wheel" > "$out/build_mamba.log" 2>&1
        echo "mamba install from the carried wheel rc=$?"
        return
    fi
    timeout 300 "$py" benchmarks/build_mamba_ssm.py --sdist .sdist/mamba_ssm-*.tar.gz --install \
        > "$out/build_mamba.log" 2>&1
    echo "mamba build rc=$?"; tail -n 2 "$out/build_mamba.log"
    if [ "${SPLIT_MAMBA_WHEEL:-0}" = 1 ]; then
        local built
        built="$(sed -n 's/^wheel: \(.*\.whl\) (.*/\1/p' "$out/build_mamba.log")"
        [ -n "$built" ] && split -b 15M "$built" "$out/$(basename "$built").part-"
    fi
}
