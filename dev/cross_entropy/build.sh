#!/usr/bin/env bash
# Builds and runs the cross_entropy lab harness from the worktree root:
#   dev/cross_entropy/build.sh [run]
# HD_INCLUDE: where hd/version.h is (a meson build's include folder).
set -eu
cd "$(dirname "$0")/../.."
inc=${HD_INCLUDE:-build/include}
cflags="-std=c11 -O2 -g -Wall -Wextra -Wshadow -Wstrict-prototypes -Wvla -Wno-unused-parameter
  -D_POSIX_C_SOURCE=200809L -fno-math-errno -fno-trapping-math -ffp-contract=off -fopenmp-simd
  -I. -Iinclude -I$inc -Idev/train_lab"
out=${LAB_OUT:-/tmp/lab_cross_entropy}
cc $cflags -o "$out" dev/cross_entropy/main.c dev/train_lab/lab.c backends/cpu/cross_entropy.c \
  backends/cpu/pool.c autotune/reference_train.c -lOpenCL -lm -lpthread
if [ "${1:-}" = run ]; then
    POCL_EXTRA_BUILD_FLAGS=${POCL_EXTRA_BUILD_FLAGS--cl-opt-disable} exec "$out"
fi
