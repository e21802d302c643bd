#!/usr/bin/env bash
# The test command: bash tests/run.sh (as root on a fresh Debian 12 machine, or as a user who
# has the packages). Installs what is missing, then runs five stages and stops at the first
# failure:
#   1. full build (OpenCL, CLBlast, OpenBLAS) and every suite (PoCL gives a device);
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build without OpenCL: every suite, any
#      sanitizer report fails;
#   3. build without OpenBLAS and OpenCL (GEMM takes the plain C path): every suite;
#   4. install into a temporary prefix, compile the README example through pkg-config and
#      through CMake's find_package against it, run both and check them against the float64
#      reference;
#   5. fuzz: the libFuzzer targets (clang, ASan+UBSan), two at a time, each for
#      $HD_FUZZ_SECONDS (default 30) seconds from its corpus: the tuning cache parser (parse,
#      write, parse must give the same file) and the trainer's readers of user files
#      (examples/llama/): safetensors (an accepted file's tensors cover its data and read back,
#      and what the writer makes of it reads back the same), config.json and the shards' index
#      (an accepted one holds what checkpoint.h says), the token file (its windows read as the
#      file holds them, a changed file refused or read in range); a crash or a failed check of
#      a target fails the stage.
# Ends with "N passed, N failed" over all suites run. Build directories live under
# $HD_TEST_BUILD_ROOT (default: build-tests/ in the repository) and are reused by later runs.
# Stage names as arguments run only those: bash tests/run.sh sanitize plain-c
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
builds="${HD_TEST_BUILD_ROOT:-$root/build-tests}"
packages=(ocl-icd-opencl-dev opencl-headers libclblast-dev libopenblas-dev libcmocka-dev
          libjansson-dev pocl-opencl-icd meson ninja-build pkg-config clang cmake)

passed=0
failed=0
stage="setup"

say() { printf '\n==> %s\n' "$*"; }
tally() { printf '%d passed, %d failed\n' "$passed" "$failed"; }
die() {
    printf '\nFAILED in stage "%s": %s\n' "$stage" "$*" >&2
    tally
    exit 1
}

install_missing() {
    command -v dpkg-query >/dev/null ||
        die "dpkg-query not found: this script expects Debian 12 (install ${packages[*]} yourself)"
    local missing=() p
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "packages: all present"
        return
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "missing packages (${missing[*]}): run as root"
        sudo=(sudo)
    fi
    say "installing ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q ||
        die "apt-get update failed"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${missing[@]}" || die "apt-get install ${missing[*]} failed"
}

# build DIR MESON_OPTIONS...: configure (or reconfigure) and compile.
build() {
    local dir="$1"
    shift
    say "[$stage] configure $dir: $*"
    if [ -f "$dir/build.ninja" ]; then
        meson setup --reconfigure "$dir" "$@" >"$dir.setup.log" 2>&1 ||
            { cat "$dir.setup.log"; die "meson setup failed"; }
    else
        mkdir -p "$(dirname "$dir")"
        meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 ||
            { cat "$dir.setup.log"; die "meson setup failed"; }
    fi
    sed -n '/^  Backends/,/^$/p' "$dir.setup.log"
    say "[$stage] compile $dir"
    ninja -C "$dir" || die "compilation failed in $dir"
}

# count LOG: adds meson test's summary ("Ok:", "Fail:", ...) to the tally.
count() {
    local ok bad
    ok=$(awk '/^Ok:/ {n += $2} END {print n + 0}' "$1")
    bad=$(awk '/^(Fail|Unexpected Pass|Timeout):/ {n += $NF} END {print n + 0}' "$1")
    passed=$((passed + ok))
    failed=$((failed + bad))
}

# suites DIR: every suite of the build, with the environment the stage set.
suites() {
    local dir="$1" log="$1.test.log" rc
    say "[$stage] meson test -C $dir"
    set +e
    meson test -C "$dir" --print-errorlogs --no-rebuild 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    count "$log"
    [ "$rc" -eq 0 ] || die "meson test failed in $dir (full log: $dir/meson-logs/testlog.txt)"
}

stage_full() {
    export POCL_CACHE_DIR="$builds/pocl-full"
    build "$builds/full" --prefix "$builds/prefix" -Dopencl=enabled -Dclblast=enabled \
        -Dopenblas=enabled -Dtests=true -Dtools=true
    if [ "${1:-}" != build-only ]; then
        suites "$builds/full"
    fi
}

stage_sanitize() {
    export POCL_CACHE_DIR="$builds/pocl-sanitize"
    export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:print_summary=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:print_summary=1
    build "$builds/sanitize" -Db_sanitize=address,undefined -Db_lundef=false \
        -Dopencl=disabled -Dtools=false
    suites "$builds/sanitize"
    unset ASAN_OPTIONS UBSAN_OPTIONS
}

stage_plain_c() {
    export POCL_CACHE_DIR="$builds/pocl-plain-c"
    build "$builds/plain-c" -Dopenblas=disabled -Dopencl=disabled -Dtools=false
    suites "$builds/plain-c"
}

# check_example BIN LOG: the README test on an example built against the installed library.
check_example() {
    local example="$1" log="$2" rc
    set +e
    LD_LIBRARY_PATH="$libdir" HD_README="$root/README.md" \
        HD_README_EXAMPLE_SOURCE="$root/tests/readme_example.c" \
        HD_README_EXAMPLE_BIN="$example" "$builds/full/tests/test_readme_example" 2>&1 |
        tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    passed=$((passed + $(awk '/^\[  PASSED  \]/ {n += $4} END {print n + 0}' "$log")))
    failed=$((failed + $(awk '/^\[  FAILED  \] [0-9]/ {n += $4} END {print n + 0}' "$log")))
    return "$rc"
}

stage_installed() {
    export POCL_CACHE_DIR="$builds/pocl-installed"
    [ -f "$builds/full/build.ninja" ] || stage_full build-only
    local prefix="$builds/prefix" pc pcdir flags example cmake_dir
    libdir=""
    rm -rf "$prefix"
    say "[$stage] meson install into $prefix"
    meson install -C "$builds/full" >"$builds/install.log" 2>&1 ||
        { cat "$builds/install.log"; die "meson install failed"; }
    pc="$(find "$prefix" -name hd-dispatch.pc -print -quit)"
    [ -n "$pc" ] || die "no hd-dispatch.pc under $prefix"
    pcdir="$(dirname "$pc")"
    libdir="$(dirname "$pcdir")"
    flags="$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs hd-dispatch)" ||
        die "pkg-config --cflags --libs hd-dispatch failed with PKG_CONFIG_PATH=$pcdir"
    example="$builds/readme_example_installed"
    say "[$stage] cc -std=c11 -Wall -Wextra -Wpedantic -Werror tests/readme_example.c $flags"
    # shellcheck disable=SC2086 # the flags are separate words
    cc -std=c11 -Wall -Wextra -Wpedantic -Werror tests/readme_example.c -o "$example" $flags ||
        die "the README example does not compile against the installed library"
    # grep reads all of ldd's output: with -q it may stop early, and under pipefail the
    # SIGPIPE that ldd then gets fails the pipeline
    LD_LIBRARY_PATH="$libdir" ldd "$example" | grep "$libdir/libdispatch" >/dev/null ||
        die "the README example does not load libdispatch from $libdir"
    check_example "$example" "$builds/installed.test.log" ||
        die "the installed README example does not match the reference"

    # The same example as a CMake user builds it: find_package(hd-dispatch), the imported
    # target hd-dispatch::dispatch (tests/cmake/CMakeLists.txt).
    cmake_dir="$builds/cmake-example"
    rm -rf "$cmake_dir"
    say "[$stage] cmake -S tests/cmake -DCMAKE_PREFIX_PATH=$prefix"
    cmake -S tests/cmake -B "$cmake_dir" -DCMAKE_PREFIX_PATH="$prefix" >"$cmake_dir.log" 2>&1 &&
        cmake --build "$cmake_dir" >>"$cmake_dir.log" 2>&1 ||
        { cat "$cmake_dir.log"; die "the README example does not build with CMake's find_package"; }
    check_example "$cmake_dir/readme_example" "$builds/installed-cmake.test.log" ||
        die "the README example built with CMake does not match the reference"
}

# fuzz_start NAME TARGET CORPUS [OPTIONS...]: starts the built target in the background for
# $seconds from its corpus; new inputs go to a directory of the build, the shipped corpus is
# only read. fuzz_finish NAME waits for it, shows the end of its log and counts it.
declare -A fuzz_pids
fuzz_start() {
    local name="$1" target="$2" corpus="$3"
    shift 3
    mkdir -p "$builds/$name-corpus"
    say "[$stage] $name for ${seconds} s"
    "$dir/$target" -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$builds/$name-" "$@" "$builds/$name-corpus" "$corpus" \
        >"$builds/$name.log" 2>&1 &
    fuzz_pids[$name]=$!
}

fuzz_finish() {
    local name="$1" log="$builds/$1.log" rc=0
    wait "${fuzz_pids[$name]}" || rc=$?
    say "[$stage] $name: exit status $rc"
    tail -n 20 "$log"
    if [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
        printf '%s failed (full log: %s; the input is saved as %s)\n' "$name" "$log" \
            "$builds/$name-crash-*" >&2
        return 1
    fi
    passed=$((passed + 1))
}

# The targets two at a time (each runs on one core): both of a pair are waited for before a
# failure stops the stage.
stage_fuzz() {
    local dir="$builds/fuzz" seconds="${HD_FUZZ_SECONDS:-30}" ok=true
    say "[$stage] configure $dir with clang"
    if [ ! -f "$dir/build.ninja" ]; then
        CC=clang meson setup "$dir" -Dfuzz=true -Dtests=false -Dtools=false -Dopencl=disabled \
            -Dopenblas=disabled >"$dir.setup.log" 2>&1 ||
            { cat "$dir.setup.log"; die "meson setup failed"; }
    fi
    ninja -C "$dir" autotune/fuzz/fuzz_cache_parser examples/llama/fuzz_safetensors \
        examples/llama/fuzz_checkpoint examples/llama/fuzz_data || die "compilation failed in $dir"
    fuzz_start fuzz autotune/fuzz/fuzz_cache_parser autotune/fuzz/corpus
    fuzz_start fuzz-safetensors examples/llama/fuzz_safetensors examples/llama/fuzz/corpus \
        -dict=examples/llama/fuzz/safetensors.dict
    fuzz_finish fuzz || ok=false
    fuzz_finish fuzz-safetensors || ok=false
    $ok || die "a fuzz target failed"
    fuzz_start fuzz-checkpoint examples/llama/fuzz_checkpoint \
        examples/llama/fuzz/checkpoint_corpus -dict=examples/llama/fuzz/checkpoint.dict
    fuzz_start fuzz-data examples/llama/fuzz_data examples/llama/fuzz/data_corpus
    fuzz_finish fuzz-checkpoint || ok=false
    fuzz_finish fuzz-data || ok=false
    $ok || die "a fuzz target failed"
}

all_stages=(full sanitize plain-c installed fuzz)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=("${all_stages[@]}")
for stage in "${stages[@]}"; do
    case " ${all_stages[*]} " in
    *" $stage "*) ;;
    *) die "unknown stage '$stage' (stages: ${all_stages[*]})" ;;
    esac
done

install_missing
mkdir -p "$builds"
# The tests must not read a tuning cache or PoCL kernel cache from the user's home.
export XDG_CACHE_HOME="$builds/xdg-cache"
unset HD_TUNE_CACHE

for stage in "${stages[@]}"; do
    "stage_${stage//-/_}"
done

say "stages passed: ${stages[*]}"
tally
