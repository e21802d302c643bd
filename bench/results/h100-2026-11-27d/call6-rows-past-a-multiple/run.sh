#!/bin/bash
# GPU call 6 (2026-11-27, fourth session): products whose rows fall just past a multiple of
# 64 or 128 with many column tiles (LoRA 257 x 4096 -> 14336 and its GEMM, 385, 193 and 300 rows),
# on the default tiles against 96-row tiles and 128 x 128 ones; two passes.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-16
V=("" "BM=96 BN=64 BK=16 RM=12 RN=4" "BM=96 BN=128 BK=16 RM=12 RN=8" "BM=96 BN=128 BK=16 RM=12 RN=8 ASYNC=3" "BM=96 BN=128 BK=8 RM=12 RN=8 LEAD=2" "BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2" "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3")
C=()
for s in "lora 257 4096 14336 16" "gemm 257 14336 4096 nn" "gemm 385 14336 4096 nn" "gemm 193 14336 4096 nn" "gemm 300 8192 4096 nn" "gemm 257 11008 4096 nt"; do
  for v in "${V[@]}"; do C+=("$s $v"); done
done
for pass in 1 2; do
  timeout 200 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
