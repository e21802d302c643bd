#!/bin/bash
# GPU call 5 (2026-11-27): deep products of few tiles whose sides are both 256 or more (the
# deep_few_tiles defaults: 64 x 128 tiles, the depth cut for about two groups per unit) against
# 128 x 128 tiles cut for about two groups per unit, through registers two stages ahead
# (LEAD=2) or, where cp.async copies both operands (TN), in 5 buffers; and 64 x 128 cut twice
# as deep.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-5
L="BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2"; A="BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5"; S="BM=64 BN=128 BK=16 RM=8 RN=8"
C=()
add() { # shape, slices of 128 x 128, slices of 64 x 128 doubled
  C+=("gemm $1" "gemm $1 $L SK=$2" "gemm $1 $S SK=$3")
  case $1 in *tn) C+=("gemm $1 $A SK=$2");; esac
}
add "512 512 8192 tn" 16 16; add "512 512 8192 nn" 16 16; add "512 512 8192 nt" 16 16
add "256 1024 8192 tn" 16 16; add "768 768 4096 nn" 7 14; add "384 1024 8192 nt" 11 16
add "640 640 6144 tn" 10 16; add "1024 512 4096 nn" 8 16; add "520 1000 5000 tn" 8 16
timeout 200 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-pass1.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
