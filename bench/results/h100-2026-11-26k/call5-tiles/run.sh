#!/bin/bash
# GPU call 5 (2026-11-26 s4): tiles for thin and skewed products (64 x 4096 x 4096,
# 257 x 14336 x 4096) and cuBLAS-shaped 256 x 128 tiles through cp.async at 4096^3.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-5
S="gemm 64 4096 4096 nn"; L="gemm 257 14336 4096 nn"; Q="gemm 4096 4096 4096"
CASES=("$S" "$S BM=64 BN=128 BK=16 RM=8 RN=8 SK=8" "$S BM=64 BN=128 BK=16 RM=8 RN=8 SK=4 ASYNC=3"
  "$S BM=64 BN=128 BK=16 RM=8 RN=8 SK=8 ASYNC=3" "$S BM=64 BN=64 BK=16 RM=4 RN=4 SK=4" "$S BM=64 BN=64 BK=16 RM=8 RN=4 SK=8"
  "$S BM=64 BN=64 BK=16 RM=4 RN=4 SK=4 ASYNC=4" "$S BM=32 BN=128 BK=16 RM=4 RN=8 SK=4" "$S BM=64 BN=128 BK=8 RM=8 RN=8 SK=8 ASYNC=4"
  "$S BM=64 BN=64 BK=16 RM=8 RN=8 SK=8" "$S BM=64 BN=64 BK=16 RM=8 RN=8 SK=16 ASYNC=3"
  "$L" "$L BM=64 BN=128 BK=16 RM=8 RN=8" "$L BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3" "$L BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2"
  "$L BM=32 BN=128 BK=16 RM=4 RN=8" "$L BM=64 BN=64 BK=16 RM=8 RN=8" "$L BM=64 BN=64 BK=16 RM=4 RN=4 ASYNC=4" "$L BM=128 BN=64 BK=16 RM=8 RN=8 ASYNC=3"
  "$Q tn" "$Q tn BM=256 BN=128 BK=8 RM=16 RN=8 ASYNC=3" "$Q tn BM=256 BN=128 BK=8 RM=16 RN=8 ASYNC=2"
  "$Q nn" "$Q nn BM=256 BN=128 BK=8 RM=16 RN=8 ASYNC=3")
for pass in 1 2; do
  timeout 300 $W/ab $W/header.txt 9 "${CASES[@]}" >> $R/ab-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
