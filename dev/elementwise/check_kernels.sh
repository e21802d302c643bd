#!/bin/sh
# Compiles the step's elementwise, RoPE and embedding programs (elem.cl + the file) with clang
# as OpenCL C 1.2 and 3.0 for NVIDIA's PTX target, under each -D set the harness runs, as
# tests/check_kernels.sh does for the other programs (PoCL is more lenient than NVIDIA's
# compiler). Run from the worktree's root.
set -u
dir=backends/fused/kernels
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checked=0 failed=0
check() { # FILE OPTIONS...
    file=$1
    shift
    cat "$dir/elem.cl" "$dir/$file.cl" > "$work/$file.cl"
    for std in CL1.2 CL3.0; do
        ext=
        [ "$std" = CL3.0 ] && ext="-Xclang -cl-ext=+__opencl_c_generic_address_space"
        checked=$((checked + 1))
        if ! ${CLANG:-clang} -target nvptx64-nvidia-nvcl $ext -x cl -cl-std=$std \
            -Xclang -finclude-default-header -fsyntax-only -Werror "$@" "$work/$file.cl"; then
            echo "FAIL $file $std $*"
            failed=$((failed + 1))
        fi
    done
}
for bf16 in 0 1; do
    for vec in 1 4; do
        check elementwise -DACT_BF16=$bf16 -DVEC=$vec -DWG=64
    done
    check elementwise -DACT_BF16=$bf16
    for heads in 1 3 4; do
        check rope -DACT_BF16=$bf16 -DHEADS_PER_ITEM=$heads -DWG=64
    done
    check rope -DACT_BF16=$bf16
    for vec in 1 2 4 8; do
        check embedding -DACT_BF16=$bf16 -DVEC=$vec -DWG=64
    done
    check embedding -DACT_BF16=$bf16
done
echo "check_kernels: $checked builds, $failed failed"
[ "$failed" -eq 0 ]
