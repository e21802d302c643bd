#!/bin/bash
# GPU call 6 (2026-11-26 s4): the depth split of 64 x 128 tiles at about two groups per unit
# (the working tree's default) against 4 slices, over products of few tile rows; LoRA 17-64.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; echo "+ working tree: tile.c deep_few_tiles split"; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-6
V="BM=64 BN=128 BK=16 RM=8 RN=8"
CASES=()
for s in "64 4096 4096 nn" "64 4096 4096 nt" "64 4096 4096 tn" "64 4096 4096 tt" "40 2304 4096 nn" "64 3072 4096 nn" "64 5504 2048 nn" "96 4096 4096 nn" "33 11008 4096 nt"; do
  CASES+=("gemm $s" "gemm $s $V SK=4" "gemm $s $V SK=4 ASYNC=3" "gemm $s $V SK=8")
done
for t in 17 32 48 64; do CASES+=("lora $t 4096 4096 16"); done
CASES+=("lora 64 4096 4096 16 $V SK=4" "lora 64 4096 4096 16 $V SK=4 ASYNC=3")
for pass in 1 2; do
  timeout 300 $W/ab $W/header.txt 9 "${CASES[@]}" >> $R/ab-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
