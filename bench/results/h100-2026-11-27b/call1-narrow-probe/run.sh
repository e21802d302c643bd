#!/bin/bash
# GPU call 1 (2026-11-27, second session): tiles whose sides are multiples of 16 but not powers
# of two (96), on products whose sides fall just past a multiple of 128, and the rate of a
# 96 x 128 tile at sizes that fill the device, against each shape's default.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-1
C=()
for s in "4093 521 1031 tn" "4093 521 1031 nn"; do
  for v in "" "BM=96 BN=96 BK=16 RM=12 RN=12" "BM=64 BN=96 BK=16 RM=4 RN=12" "BM=64 BN=96 BK=16 RM=8 RN=12" "BM=128 BN=96 BK=16 RM=8 RN=12" "BM=96 BN=64 BK=16 RM=12 RN=8"; do C+=("gemm $s $v"); done
done
for v in "BM=96 BN=96 BK=16 RM=12 RN=12 ASYNC=3" "BM=64 BN=96 BK=16 RM=4 RN=12 ASYNC=3" "BM=128 BN=96 BK=16 RM=8 RN=12 ASYNC=3"; do C+=("gemm 4093 521 1031 tn $v"); done
for v in "" "BM=96 BN=128 BK=16 RM=12 RN=8 SK=2" "BM=96 BN=128 BK=16 RM=12 RN=8 SK=3" "BM=96 BN=128 BK=8 RM=12 RN=8 LEAD=2 SK=2" "BM=96 BN=64 BK=16 RM=12 RN=8 SK=2"; do C+=("gemm 257 4096 14336 nn $v"); done
C+=("lora 257 4096 14336 16")
for s in "4096 4096 4096 nn" "2048 2048 2048 nn" "1025 4096 4096 nn"; do
  for v in "" "BM=96 BN=128 BK=16 RM=12 RN=8 LEAD=2" "BM=96 BN=128 BK=8 RM=12 RN=8 LEAD=2" "BM=96 BN=128 BK=16 RM=12 RN=8"; do C+=("gemm $s $v"); done
done
for v in "" "BM=96 BN=96 BK=16 RM=12 RN=12" "BM=96 BN=128 BK=16 RM=12 RN=8 SK=2" "BM=48 BN=128 BK=16 RM=12 RN=8"; do C+=("gemm 997 1009 1013 nn $v"); done
for pass in 1 2; do
  timeout 200 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
