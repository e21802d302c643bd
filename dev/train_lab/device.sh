#!/usr/bin/env bash
# Runs the three lab harnesses on a GPU through its vendor's OpenCL driver (the device
# machine), from the worktree root, with build-lab/ carried: include/ (hd/version.h and the
# OpenCL headers), lib/ (the ICD loader, where the machine has none) and bin/ (the harnesses
# built here, where the machine has no C compiler). The log goes to $OUT/log.txt.
set -u
out=${OUT:-/tmp}
lab=$PWD/build-lab
{
    echo "== machine"
    nvidia-smi -L 2>&1
    ls /etc/OpenCL/vendors 2>&1
    ldconfig -p | grep -i opencl
    command -v cc gcc clang
    if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then
        lib=$(ldconfig -p | awk '/libnvidia-opencl.so.1/ {print $NF; exit}')
        [ -n "$lib" ] || lib=$(find / -xdev -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
        echo "no ICD vendor file: using $lib"
        mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd
        export OCL_ICD_VENDORS=/tmp/icd
    fi
    ldconfig -p | grep -q 'libOpenCL.so.1 ' || export LD_LIBRARY_PATH=$lab/lib:${LD_LIBRARY_PATH:-}
    status=0
    for op in add_rms_norm cross_entropy adamw; do
        echo "== $op"
        bin=$lab/bin/lab_$op
        if command -v cc >/dev/null; then
            if LAB_OUT=/tmp/lab_$op HD_INCLUDE=$lab/include CPATH=$lab/include \
                LIBRARY_PATH=$lab/lib dev/$op/build.sh; then
                bin=/tmp/lab_$op
            fi
        fi
        timeout 500 "$bin" || status=1
    done
    echo "== status $status"
} > "$out/log.txt" 2>&1
tail -60 "$out/log.txt"
