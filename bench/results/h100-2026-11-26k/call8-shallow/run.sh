#!/bin/bash
# GPU call 8 (2026-11-26 s4): shallow products of 32 x 64 tiles, their depth cut for about two
# groups per unit (the working tree's default) against none (the variant naming the tile).
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; echo "+ working tree: tile.c shallow split"; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-8
O="BM=32 BN=64 BK=16 RM=4 RN=4"
CASES=()
for s in "100 1000 1000 nn" "100 1000 1000 nt" "100 1000 1000 tn" "512 512 512 nn" "512 512 512 tt" "200 700 900 nn" "384 512 768 nn" "128 2048 512 nn" "100 1000 1000 tt"; do
  CASES+=("gemm $s" "gemm $s $O")
done
for pass in 1 2; do
  timeout 300 $W/ab $W/header.txt 9 "${CASES[@]}" >> $R/ab-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
