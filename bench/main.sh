#!/bin/sh
# The main benchmark job. On a fresh Debian 12 machine, as root: installs what is missing,
# builds a release, tunes, runs dispatch-bench on every suite, runs the peers that can run
# here (numpy when python3-numpy imports, PyTorch when torch imports), and leaves JSON, CSV,
# tables and plots under the results folder.
#
#   sh bench/main.sh [RESULTS_DIR]        (default: results/<date>)
#
# Environment: SUITES (default "seed,train,gemm"), BENCH_ARGS (extra dispatch-bench options),
# AUTOTUNE_ARGS (extra dispatch-autotune options), PEERS (default "numpy torch"),
# PYTHON (default /usr/bin/python3, which sees Debian's python3-numpy), BUILD (default
# build-release), SKIP_APT=1, SKIP_BUILD=1 (use BUILD as it is, e.g. one built on another
# machine of the same architecture).
set -eu

cd "$(dirname "$0")/.."
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${1:-results/$stamp}
suites=${SUITES:-seed,train,gemm}
python=${PYTHON:-/usr/bin/python3}
build=${BUILD:-build-release}
peers_wanted=${PEERS:-numpy torch}
mkdir -p "$out"

if [ "${SKIP_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    need=""
    for pkg in build-essential meson ninja-build pkg-config ocl-icd-opencl-dev opencl-headers \
               libclblast-dev libopenblas-dev libcmocka-dev python3 python3-numpy \
               python3-matplotlib; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
    done
    # Some OpenCL driver: the vendor's if installed, else PoCL on the CPU.
    ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1 || need="$need pocl-opencl-icd"
    if [ -n "$need" ]; then
        echo "== installing:$need"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need
    fi
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "== building ($build, release)"
    [ -d "$build" ] || meson setup "$build" --buildtype=release -Dtests=false
    ninja -C "$build"
fi

export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$PWD/$build/pocl-cache}
export HD_TUNE_CACHE=${HD_TUNE_CACHE:-$PWD/$out/tune-cache.txt}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "host: $(uname -a)"
    command -v clinfo >/dev/null && clinfo -l 2>/dev/null || true
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv || true
} > "$out/machine.txt"

echo "== dispatch-autotune"
if [ -x "$build/autotune/tool/dispatch-autotune" ]; then
    # shellcheck disable=SC2086
    "$build/autotune/tool/dispatch-autotune" ${AUTOTUNE_ARGS:-} 2>&1 | tee "$out/autotune.txt"
else
    echo "dispatch-autotune not built; auto uses the untuned cost model" | tee "$out/autotune.txt"
fi

bench="$build/bench/dispatch-bench"
"$bench" --list-cases --json "$out/cases.json"

echo "== dispatch-bench --suite $suites"
# shellcheck disable=SC2086
"$bench" --suite "$suites" --json "$out/ours.json" --csv-out "$out/ours.csv" ${BENCH_ARGS:-} |
    tee "$out/ours.txt"

peers=""
wants() { case " $peers_wanted " in *" $1 "*) return 0 ;; esac; return 1; }
if ! wants numpy; then
    echo "== numpy peer not asked for (PEERS=$peers_wanted)"
elif "$python" -c 'import numpy' 2>/dev/null; then
    echo "== numpy peer"
    "$python" bench/peers/numpy_peer.py --cases "$out/cases.json" --suite "$suites" \
        --json "$out/numpy.json" | tee "$out/numpy.txt"
    peers="$peers numpy"
else
    echo "== numpy peer skipped: numpy does not import in $python"
fi
if ! wants torch; then
    echo "== PyTorch peer not asked for (PEERS=$peers_wanted)"
elif "$python" -c 'import torch' 2>/dev/null; then
    if "$python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
        dev=cuda
    else
        dev=cpu
    fi
    echo "== PyTorch peer ($dev)"
    "$python" bench/peers/torch_peer.py --device "$dev" --cases "$out/cases.json" \
        --suite "$suites" --json "$out/torch.json" | tee "$out/torch.txt"
    peers="$peers torch"
else
    echo "== PyTorch peer skipped: torch does not import in $python"
fi

for peer in $peers; do
    echo "== gap table vs $peer"
    "$bench" --compare "$out/$peer.json" --ours "$out/ours.json" | tee "$out/gap-$peer.txt"
done

peer_files=""
for peer in $peers; do peer_files="$peer_files $out/$peer.json"; done
for mode in device sync chain; do
    # shellcheck disable=SC2086
    "$python" bench/plot.py --mode "$mode" --out "$out/plots" "$out/ours.json" $peer_files || true
done
echo "== results in $out"
