#!/bin/bash
# GPU call 3 (2026-11-27, second session): work-item shapes of 4 x 16, 16 x 4, 4 x 12 and
# 4 x 8 results (128 work-items a group) against the 8 x 8 of the 64 x 128 tiles and each
# shape's default, on products that fill a wave with 64 x 128 tiles or less, and 4096^3.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-3
C=()
for s in "512 4096 4096 nn" "997 1009 1013 nn" "1024 1024 1024 nn" "8192 512 512 nn" "3001 700 1500 nn" "4096 4096 512 tn" "2048 2048 2048 nn" "4096 4096 4096 nn"; do
  for v in "" "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3" "BM=64 BN=128 BK=16 RM=4 RN=16 ASYNC=3" "BM=128 BN=64 BK=16 RM=16 RN=4 ASYNC=3" "BM=64 BN=96 BK=16 RM=4 RN=12 ASYNC=3" "BM=64 BN=64 BK=16 RM=4 RN=8 ASYNC=3" "BM=128 BN=128 BK=16 RM=8 RN=16 ASYNC=3"; do C+=("gemm $s $v"); done
done
for s in "512 4096 4096 nt" "768 4096 4096 nt" "1024 1024 1024 nt"; do
  for v in "" "BM=64 BN=128 BK=16 RM=8 RN=8" "BM=64 BN=128 BK=16 RM=4 RN=16" "BM=128 BN=64 BK=16 RM=16 RN=4" "BM=64 BN=96 BK=16 RM=4 RN=12" "BM=64 BN=64 BK=16 RM=4 RN=8"; do C+=("gemm $s $v"); done
done
for pass in 1 2; do
  timeout 270 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
