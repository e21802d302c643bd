#!/bin/bash
# GPU call 10 (2026-11-26 s4): products whose 128 x 128 tiles are fewer than the units and
# whose 64 x 128 ones give each unit about one group (the half-fill defaults): those against
# 128 x 128 tiles of 16 x 8 loaded two stages ahead, and the depth split.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-10
L8="BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2"; L16="BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2"; H="BM=64 BN=128 BK=16 RM=8 RN=8"
CASES=()
for s in "1024 1024 1024 nn" "1024 1024 1024 nt" "1024 1024 1024 tn" "997 1009 1013 nn" "768 1024 2048 nn" "1536 1024 1024 nn" "1024 2048 1024 nn" "1000 1000 3000 nn"; do
  CASES+=("gemm $s" "gemm $s $L8" "gemm $s $L16" "gemm $s $H SK=2" "gemm $s $L8 SK=2")
done
for pass in 1 2; do
  timeout 200 $W/ab $W/header.txt 9 "${CASES[@]}" >> $R/ab-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
