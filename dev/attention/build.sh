#!/bin/sh
# Builds the attention lab harness (dev/attention/harness) from the tree. The generated
# include/hd/version.h comes from a meson build directory: $HD_BUILD_INCLUDE, else build/include
# of this tree. Run the harness from the tree's root: dev/attention/harness [KERNELS_DIR].
# PoCL builds faster without optimisation: POCL_EXTRA_BUILD_FLAGS=-cl-opt-disable.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
inc=${HD_BUILD_INCLUDE:-$root/build/include}
${CC:-cc} -std=c11 -O2 -g -Wall -Wextra -D_POSIX_C_SOURCE=200809L -ffp-contract=off -fopenmp-simd \
    -I"$root" -I"$root/include" -I"$inc" \
    "$root/dev/attention/harness.c" "$root/backends/cpu/attention.c" \
    "$root/backends/cpu/pool.c" "$root/autotune/reference_attention.c" \
    -o "$root/dev/attention/harness" -lOpenCL -lm -lpthread
