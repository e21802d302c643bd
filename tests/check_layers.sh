#!/bin/sh
# The layers point one way (ARCHITECTURE.md): include/hd -> core/ -> backends/ -> dispatch/ ->
# the tools (autotune/, bench/), each using only those before it, by its includes and by its
# calls:
#   - core/ includes nothing of ours but core/ (and the public headers);
#   - backends/ includes core/, backends/backend.h (the vtable), backends/reference.h (the
#     float64 GEMM element) and the backend's own folder, never dispatch/, and reads no field
#     of the context; the fused backend reaches the device through the runtime interface
#     (backends/runtime/runtime.h) alone, CLBlast also through the OpenCL runtime; the
#     interface's implementations (opencl/, cuda/) include it and its pool, the CUDA runtime
#     also the OpenCL runtime (its compiler), the interface both implementations;
#   - dispatch/ includes core/, backends/backend.h and its own headers: nothing of a backend's
#     folder, the OpenCL runtime or autotune/;
#   - the tools reach dispatch/ only through its tools' interface (dispatch/tools.h and the few
#     headers it names), never the OpenCL runtime, never a context's field;
#   - no object of the library calls a function of a layer above its own (nm of each object);
# and libdispatch.so holds none of the tools' code (measurement, the device's calibration
# measurements, candidate choice, the reference, the cache writer, the suites: no symbol the
# tools' library defines) and no fault injection; neither do the installed tools hold fault
# injection.
# Usage: check_layers.sh LIBDISPATCH_SO SOURCE_ROOT TOOLS_LIB [INSTALLED_TOOL...]
set -u
lib=$1
root=$2
tools_lib=$3
shift 3
status=0

fail() {
    echo "FAIL: $*" >&2
    status=1
}

command -v nm > /dev/null || { echo "nm not found: skipped" >&2; exit 77; }
[ -f "$lib" ] || { echo "no library at $lib" >&2; exit 1; }

forbidden='hd__measure|hd__tune_choose|hd__tune_fastest|hd__tune_save|hd__tune_format|hd__calibrat|hd__ref_|hd__bench_|hd__fault|hd__registry_list|hd__registry_device_measure|hd__device_(copy_bandwidth|launch_latency|upload_seconds)|hd__runtime_measure_ops'
found=$(nm "$lib" | awk '{print $NF}' | grep -E "^($forbidden)" | sort -u)
[ -z "$found" ] || fail "libdispatch holds tools' or test-only code: $(echo $found)"
nm "$lib" | grep -q ' hd__call' || fail "nm shows no library symbols in $lib: check the test itself"

# jansson, the JSON parser of dispatch-bench's result files and of the Llama trainer's
# safetensors headers (examples/llama/), is theirs alone: the library neither links it nor
# holds its code.
if command -v readelf > /dev/null; then
    readelf -d "$lib" | grep -q 'NEEDED.*libjansson' && fail "libdispatch.so links jansson"
fi
nm "$lib" | awk '{print $NF}' | grep -qE '^json_' && fail "libdispatch.so holds jansson's code"

# Every function and object the tools' library defines stays out of libdispatch.so, whatever
# its name (static functions and compiler-generated names aside).
[ -f "$tools_lib" ] || fail "no tools' library at $tools_lib"
tmp=$(mktemp -d) || exit 1
nm --defined-only "$tools_lib" 2>/dev/null |
    awk 'NF == 3 && $2 ~ /^[TDRB]$/ && $3 ~ /^hd_/ {print $3}' | sort -u > "$tmp/tools"
nm --defined-only "$lib" | awk 'NF == 3 {print $3}' | sort -u > "$tmp/lib"
[ -s "$tmp/tools" ] || fail "nm shows no symbols in $tools_lib: check the test itself"
both=$(comm -12 "$tmp/tools" "$tmp/lib")
rm -rf "$tmp"
[ -z "$both" ] || fail "libdispatch holds code of the tools' library: $(echo $both)"

# The installed tools time the library as programs link it: no fault injection.
for tool in "$@"; do
    [ -f "$tool" ] || { fail "no tool at $tool"; continue; }
    nm "$tool" | grep -q ' hd__call' || fail "nm shows no library symbols in $tool"
    found=$(nm "$tool" | awk '{print $NF}' | grep -E '^hd__fault' | sort -u)
    [ -z "$found" ] || fail "$tool holds fault injection: $(echo $found)"
done

# Includes of each library layer (the fuzzer and the tests are white-box, and skipped).
includes() { # DIR...: every '#include "..."' line of the C sources under the folders
    find "$@" \( -name '*.c' -o -name '*.h' \) ! -path '*/fuzz/*' -exec grep -nH '#include "' {} +
}
[ -d "$root/core" ] || fail "no core/ under $root: check the test itself"
bad=$(includes "$root/core" | grep -vE '#include "core/[a-z_]+\.h"')
[ -z "$bad" ] || fail "core/ includes a header outside core/:
$bad"
for dir in "$root"/backends/*/; do
    name=$(basename "$dir")
    allowed="core/[a-z_]+\.h|backends/(backend|reference)\.h|backends/$name/[a-z_]+\.h"
    case $name in
    fused) allowed="$allowed|backends/runtime/runtime\.h" ;;
    clblast) allowed="$allowed|backends/(opencl|runtime)/runtime\.h" ;;
    opencl) allowed="$allowed|backends/runtime/(runtime|pool)\.h" ;;
    cuda) allowed="$allowed|backends/runtime/(runtime|pool)\.h|backends/opencl/runtime\.h" ;;
    runtime) allowed="$allowed|backends/opencl/runtime\.h|backends/cuda/cuda\.h" ;;
    esac
    bad=$(includes "$dir" | grep -vE "#include \"($allowed)\"")
    [ -z "$bad" ] || fail "backends/$name includes a header outside core/, backends/backend.h and its own folder:
$bad"
done
bad=$(find "$root"/backends -maxdepth 1 -name '*.[ch]' -exec grep -nH '#include "dispatch/' {} +)
[ -z "$bad" ] || fail "backends/ includes dispatch/:
$bad"
bad=$(grep -rnE '(^|[^A-Za-z0-9_])ctx->' "$root"/backends --include='*.c' --include='*.h' |
    grep -vE '^[^:]+:[0-9]+:\s*(/?\*|//)')
[ -z "$bad" ] || fail "a backend reads a field of the context:
$bad"
bad=$(includes "$root/dispatch" | grep -vE '#include "(dispatch/[a-z_]+\.h|core/[a-z_]+\.h|backends/backend\.h)"')
[ -z "$bad" ] || fail "dispatch/ includes a header outside core/, dispatch/ and backends/backend.h:
$bad"
bad=$(grep -nE '#include <(CL/|clblast|cblas|openblas)' "$root"/dispatch/*.c "$root"/dispatch/*.h)
[ -z "$bad" ] || fail "dispatch/ includes a device or BLAS library's header:
$bad"

# Calls: each object of the library by its folder (core_, backends_, dispatch_ and the kernel
# sources the fused backend embeds), every function it calls that the library defines defined
# in its own layer or one before it.
build=$(dirname "$lib")
objects=$(find "$build"/libdispatch_common.a.p "$build"/libdispatch.so.*.p -name '*.o' 2>/dev/null)
[ -n "$objects" ] || fail "no objects of the library under $build: check the test itself"
rank() {
    case $(basename "$1") in
    core_*) echo 0 ;;
    backends_* | meson-generated_*) echo 1 ;;
    dispatch_*) echo 2 ;;
    *) echo 9 ;;
    esac
}
tmp=$(mktemp -d) || exit 1
for o in $objects; do
    r=$(rank "$o")
    nm --defined-only "$o" | awk -v r="$r" 'NF == 3 && $2 ~ /^[TDRBV]$/ {print $3, r}'
done | sort -u > "$tmp/defined"
for o in $objects; do
    r=$(rank "$o")
    [ "$r" = 9 ] && { fail "an object of no known layer: $o"; continue; }
    nm --undefined-only "$o" | awk '{print $NF}' | sort -u |
        join - "$tmp/defined" | awk -v r="$r" -v o="$(basename "$o")" \
            '$2 > r {print o " calls " $1 " of a layer above it"}'
done > "$tmp/upward"
[ -s "$tmp/upward" ] && fail "calls against the direction of the layers:
$(cat "$tmp/upward")"
rm -rf "$tmp"

# The tuning cache and the tools reach the device through dispatch/device.h, never the
# OpenCL runtime itself.
bad=$(grep -rnE '#include "backends/opencl/' "$root"/autotune "$root"/bench --include='*.c' \
    --include='*.h')
[ -z "$bad" ] || fail "autotune/ or bench/ includes the OpenCL runtime:
$bad"

# The tools (autotune/tool/, bench/, the tools' library in autotune/) use dispatch/tools.h and
# the few headers it names beside it, never the dispatcher's own (context, checks, scheduler,
# memo, tensors, fault injection), and never the context's fields, so that dispatch/ can change
# those without breaking a tool. The fuzzer, like the tests, is white-box.
tools=$(find "$root"/autotune "$root"/bench \( -name '*.c' -o -name '*.h' \) \
    ! -path "$root/autotune/fuzz/*" | sort)
[ -n "$tools" ] || fail "no sources of the tools under $root: check the test itself"
bad=$(grep -nE '#include "dispatch/' /dev/null $tools |
    grep -vE '#include "dispatch/(tools|device|tuning|tune_file)\.h"')
[ -z "$bad" ] || fail "a tool includes a header of dispatch/ other than its interface (tools.h):
$bad"
bad=$(grep -nE '(^|[^A-Za-z0-9_])ctx->' /dev/null $tools)
[ -z "$bad" ] || fail "a tool reads the context's fields:
$bad"

[ $status -eq 0 ] && echo "layers: ok"
exit $status
