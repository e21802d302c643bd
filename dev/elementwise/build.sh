#!/bin/sh
# Builds the harness (dev/elementwise/check) from the worktree's root, with the library's
# warning and floating-point flags; version.h from a meson build of the tree (build/, or
# $HD_BUILD_INCLUDE). Run it from the root: dev/elementwise/build.sh && dev/elementwise/check
# (POCL_EXTRA_BUILD_FLAGS=-cl-opt-disable makes PoCL's kernel builds faster).
set -eu
inc=${HD_BUILD_INCLUDE:-build/include}
${CC:-cc} -std=c11 -O2 -g -Wall -Wextra -Wshadow -Wstrict-prototypes -Wvla \
    -Wno-unused-parameter -D_POSIX_C_SOURCE=200809L -fno-math-errno -fno-trapping-math \
    -ffp-contract=off -fopenmp-simd -I. -Iinclude -I"$inc" \
    -o dev/elementwise/check \
    dev/elementwise/main.c dev/elementwise/harness.c dev/elementwise/check_elementwise.c \
    dev/elementwise/check_rope.c dev/elementwise/check_embedding.c \
    backends/cpu/elementwise.c backends/cpu/rope.c backends/cpu/embedding.c backends/cpu/pool.c \
    autotune/reference_elementwise.c \
    -lOpenCL -lm -lpthread
