#!/usr/bin/env bash
# The norm helper's kernels compiled as tests/check_kernels.sh does (clang, OpenCL C 3.0 for
# NVIDIA's PTX target, generic address space on) under a sample of their build options.
# Usage: dev/train_lab/check_clang.sh   (from the worktree root)
set -u
dir=backends/fused/kernels
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0 checked=0
for f in add_rms_norm cross_entropy adamw; do
    cat $dir/common.cl $dir/elem.cl $dir/$f.cl > "$work/$f.cl"
done
check() { # PROGRAM OPTIONS...
    local program=$1
    shift
    checked=$((checked + 1))
    if ! out=$(clang -target nvptx64-nvidia-nvcl -Xclang -cl-ext=+__opencl_c_generic_address_space \
        -x cl -cl-std=CL3.0 -Xclang -finclude-default-header -fsyntax-only -Dasm=__asm__ \
        "$@" "$work/$program.cl" 2>&1); then
        echo "FAIL $program $*"
        echo "$out" | grep -m 8 -A3 'error'
        failed=$((failed + 1))
    elif [ -n "$out" ]; then
        echo "WARN $program $*"
        echo "$out" | head -20
    fi
}
for bf in 0 1; do
    for p in 0 1; do
        check add_rms_norm -DACT_BF16=$bf -DWG=256 -DROWS=1 -DVEC=4 -DCACHE=4 -DPREFETCH=$p
        check add_rms_norm -DACT_BF16=$bf -DWG=128 -DROWS=4 -DVEC=1 -DCACHE=2 -DPREFETCH=$p
    done
    check add_rms_norm -DACT_BF16=$bf -DWG=64 -DROWS=2 -DVEC=4 -DCACHE=0
    check cross_entropy -DACT_BF16=$bf -DWG=256 -DROWS=1 -DVEC=4
    check cross_entropy -DACT_BF16=$bf -DWG=64 -DROWS=8 -DVEC=1
done
check adamw -DWG=256 -DROWS=1 -DELEMS=4
check adamw -DWG=64 -DROWS=1 -DELEMS=1
echo "check_clang: $checked builds, $failed failed"
[ "$failed" -eq 0 ]
