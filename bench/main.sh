#!/bin/sh
# The main benchmark job. On a fresh Debian 12 machine, as root: installs what is missing,
# builds a release, tunes this machine into the tuning cache every program reads by default,
# runs dispatch-bench on every suite, runs the peers that can run here (numpy when
# python3-numpy imports, PyTorch when torch imports), and leaves JSON, CSV, tables and plots
# under the results folder. From a built tree it takes about 10 minutes on a GPU machine and
# 15 on a 2-core CPU machine: each tool skips, with a note, what its time budget cannot hold.
#
#   sh bench/main.sh [RESULTS_DIR]   (default: results/<date> in the repository; a relative
#                                     folder is taken from the directory the command runs in)
#
# Environment: SUITES (default "seed,train,gemm,backward,step"), BENCH_ARGS (extra
# dispatch-bench options), AUTOTUNE_ARGS (extra dispatch-autotune options), TUNE_TIME and
# BENCH_TIME (seconds the tuner and the benchmark may take, default 220 and 240), PEER_TIME
# (each peer, default 60; these budgets add up to under 10 minutes, the llama stage and the
# plots come on top), PEERS (default "numpy torch"), PYTHON (default /usr/bin/python3, which
# sees Debian's python3-numpy), BUILD (default build-release), HD_TUNE_CACHE (the cache to
# tune, default the one programs read: $XDG_CACHE_HOME/hd-dispatch/tune.txt, else
# ~/.cache/hd-dispatch/tune.txt), SKIP_APT=1, SKIP_BUILD=1 (use BUILD as it is, e.g. one built
# on another machine of the same architecture), LLAMA=0 (skip the Llama trainer's step against
# PEFT), LLAMA_CONFIG (its model: 8b2, the default, small, small-llama3,
# small-mistral or small-qwen2; bench/peers/torch_llama.py), STAGES (the stages to run,
# default "tune bench peers llama": a machine that limits a command's time runs them in two
# commands into one RESULTS_DIR, the tuning cache kept between them), SHAPES (a shapes file, as
# dispatch-autotune --shapes reads it: its cases are tuned too, within SHAPES_TUNE_TIME
# seconds, default 60, and timed by the benchmark and the peers as the suite "file").
set -eu

stamp=$(date -u +%Y%m%dT%H%M%SZ)
case "${1:-}" in
"") out="" ;;
/*) out=$1 ;;
*) out=$PWD/$1 ;;
esac
shapes=${SHAPES:-}
[ -z "$shapes" ] || [ -f "$shapes" ] || { echo "SHAPES=$shapes: no such file" >&2; exit 2; }
case "$shapes" in "" | /*) ;; *) shapes=$PWD/$shapes ;; esac
cd "$(dirname "$0")/.."
out=${out:-$PWD/results/$stamp}

# Ctrl-C reaches every process of the job: the tools stop and write what they have, tee keeps
# copying it (it ignores the interrupt), and the job stops after the step in progress.
log() { (trap '' INT; exec tee "$1"); }
trap 'echo "== interrupted: what finished is in $out" >&2; exit 130' INT
suites=${SUITES:-seed,train,gemm,backward,step}
python=${PYTHON:-/usr/bin/python3}
build=${BUILD:-build-release}
peers_wanted=${PEERS:-numpy torch}
mkdir -p "$out"

if [ "${SKIP_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    need=""
    for pkg in build-essential meson ninja-build pkg-config ocl-icd-opencl-dev opencl-headers \
               libclblast-dev libopenblas-dev libcmocka-dev libjansson-dev python3 python3-numpy \
               python3-matplotlib; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
    done
    # Some OpenCL driver: the vendor's if installed, else PoCL on the CPU.
    ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1 || need="$need pocl-opencl-icd"
    if [ -n "$need" ]; then
        echo "== installing:$need"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need
    fi
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "== building ($build, release)"
    [ -d "$build" ] || meson setup "$build" --buildtype=release -Dtests=false
    ninja -C "$build"
fi

export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$PWD/$build/pocl-cache}
cache=${HD_TUNE_CACHE:-${XDG_CACHE_HOME:-${HOME:-.}/.cache}/hd-dispatch/tune.txt}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "host: $(uname -a)"
    command -v clinfo >/dev/null && clinfo -l 2>/dev/null || true
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv || true
} > "$out/machine.txt"

stages=" ${STAGES:-tune bench peers llama} "
stage() { case "$stages" in *" $1 "*) return 0 ;; esac; return 1; }

if ! stage tune; then
    echo "== dispatch-autotune not asked for (STAGES=$stages): the cache as it is"
elif [ -x "$build/autotune/tool/dispatch-autotune" ]; then
    echo "== dispatch-autotune into $cache"
    # shellcheck disable=SC2086
    "$build/autotune/tool/dispatch-autotune" --suites "$suites" --cache "$cache" \
        --max-time "${TUNE_TIME:-220}" ${AUTOTUNE_ARGS:-} 2>&1 | log "$out/autotune.txt"
    if [ -n "$shapes" ]; then
        "$build/autotune/tool/dispatch-autotune" --shapes "$shapes" --cache "$cache" \
            --max-time "${SHAPES_TUNE_TIME:-60}" 2>&1 | log "$out/autotune-shapes.txt"
    fi
    cp "$cache" "$out/tune-cache.txt" 2>/dev/null || true
else
    echo "dispatch-autotune not built; auto uses the untuned cost model" | log "$out/autotune.txt"
fi

bench="$build/bench/dispatch-bench"
# dispatch-bench, with the SHAPES file's cases where there is one (the suite "file")
bench_run() {
    if [ -n "$shapes" ]; then "$bench" --shapes "$shapes" "$@"; else "$bench" "$@"; fi
}
bench_run --list-cases --json "$out/cases.json"

if stage bench; then
    echo "== dispatch-bench --suites $suites${shapes:+ --shapes $shapes}"
    # shellcheck disable=SC2086
    bench_run --suites "$suites" --cache "$cache" --max-time "${BENCH_TIME:-240}" \
        --json "$out/ours.json" --csv-out "$out/ours.csv" ${BENCH_ARGS:-} | log "$out/ours.txt"
fi
[ -z "$shapes" ] || suites="$suites,file" # the peers' list

peers=""
wants() { case " $peers_wanted " in *" $1 "*) return 0 ;; esac; return 1; }
stage peers || peers_wanted=""
if ! wants numpy; then
    echo "== numpy peer not asked for (PEERS=$peers_wanted)"
elif "$python" -c 'import numpy' 2>/dev/null; then
    echo "== numpy peer"
    "$python" bench/peers/numpy_peer.py --cases "$out/cases.json" --suite "$suites" \
        --max-time "${PEER_TIME:-60}" \
        --json "$out/numpy.json" | log "$out/numpy.txt"
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
        --max-time "${PEER_TIME:-60}" \
        --suite "$suites" --json "$out/torch.json" | log "$out/torch.txt"
    peers="$peers torch"
else
    echo "== PyTorch peer skipped: torch does not import in $python"
fi

for peer in $peers; do
    [ -f "$out/ours.json" ] || break
    echo "== gap table vs $peer"
    "$bench" --compare "$out/$peer.json" --ours "$out/ours.json" | log "$out/gap-$peer.txt"
done

# The Llama LoRA trainer against transformers + PEFT on the same weights, LoRA factors and
# tokens (bench/peers/torch_llama.py): where PyTorch sees a GPU, the step of LLAMA_CONFIG
# (default 8b2: two Llama-3-8B-shaped layers, 2048 tokens) in fp32 (losses and gradients
# compared) and in tf32; LLAMA=0 skips it.
trainer="$build/examples/llama_lora"
if [ "${LLAMA:-1}" = 1 ] && stage llama && [ -x "$trainer" ] &&
    "$python" -c 'import torch, sys, peft, transformers; sys.exit(not torch.cuda.is_available())' \
        2>/dev/null; then
    config=${LLAMA_CONFIG:-8b2}
    work="$out/llama-$config"
    mkdir -p "$work"
    echo "== Llama LoRA step ($config) against transformers + PEFT"
    "$python" bench/peers/torch_llama.py make --config "$config" --dir "$work"
    # shellcheck disable=SC2046
    "$trainer" $("$python" bench/peers/torch_llama.py args --config "$config" --dir "$work") \
        --save-grads "$work/ours-grads.safetensors" --json "$work/ours.json" 2>&1 |
        log "$out/llama-ours.txt"
    # the trainer's step in tf32 too, as PEFT's is timed (its losses are not compared)
    # shellcheck disable=SC2046
    "$trainer" $("$python" bench/peers/torch_llama.py args --config "$config" --dir "$work") \
        --precision tf32 --json "$work/ours-tf32.json" 2>&1 | log "$out/llama-ours-tf32.txt"
    "$python" bench/peers/torch_llama.py compare --config "$config" --dir "$work" \
        --json "$out/llama-torch.json" 2>&1 | log "$out/llama-torch.txt"
    cp "$work/ours.json" "$out/llama-ours.json"
    cp "$work/ours-tf32.json" "$out/llama-ours-tf32.json" 2>/dev/null || true
    rm -f "$work"/*.safetensors "$work/tokens.bin" # gigabytes: the results keep the figures
else
    echo "== Llama LoRA step skipped (LLAMA=0, no trainer, or no CUDA, PEFT or transformers)"
fi

peer_files=""
for peer in $peers; do peer_files="$peer_files $out/$peer.json"; done
for mode in device sync chain; do
    [ -f "$out/ours.json" ] || break
    # shellcheck disable=SC2086
    "$python" bench/plot.py --mode "$mode" --out "$out/plots" "$out/ours.json" $peer_files || true
done
echo "== results in $out"
echo "== tuning cache: $cache (a copy: $out/tune-cache.txt)"
if [ -n "${HD_TUNE_CACHE:-}" ]; then
    echo "   programs read it with HD_TUNE_CACHE=$cache (or hd_context_options.tune_cache)"
else
    echo "   programs on this machine read it by default"
fi
