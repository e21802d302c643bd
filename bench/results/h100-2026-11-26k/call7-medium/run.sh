#!/bin/bash
# GPU call 7 (2026-11-26 s4): depth splits and tiles for medium products that fill the device
# part way (512 x 4096 x 4096 NT, 512 x 512 x 8192 TN, 997 x 1009 x 1013, 127 x 4099 x 2053 NT,
# 100 x 1000 x 1000), at d330349.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-7
A="gemm 512 4096 4096 nt"; B="gemm 512 512 8192 tn"; C="gemm 997 1009 1013 nn"; E="gemm 127 4099 2053 nt"; F="gemm 100 1000 1000 nn"
M="BM=64 BN=128 BK=16 RM=8 RN=8"; L="BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2"
CASES=("$A" "$A $M SK=2" "$A $M SK=3" "$A BM=128 BN=128 BK=8 RM=16 RN=8 SK=2" "$A $L SK=2" "$A $L SK=3"
  "$B" "$B $M SK=16" "$B BM=64 BN=64 BK=16 RM=4 RN=4 SK=8" "$B BM=64 BN=64 BK=16 RM=8 RN=8 SK=16" "$B BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5 SK=8" "$B BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5 SK=16"
  "$C" "$C $M SK=2" "$C $M SK=3" "$C BM=128 BN=128 BK=8 RM=16 RN=8 SK=2" "$C BM=64 BN=64 BK=16 RM=8 RN=8"
  "$E" "$E $M SK=8" "$E BM=32 BN=128 BK=16 RM=4 RN=8 SK=4" "$E BM=64 BN=64 BK=16 RM=8 RN=8 SK=4"
  "$F" "$F BM=32 BN=64 BK=16 RM=4 RN=4 SK=2" "$F BM=64 BN=64 BK=16 RM=4 RN=4 SK=2" "$F BM=32 BN=128 BK=16 RM=4 RN=8 SK=3" "$F BM=32 BN=64 BK=16 RM=4 RN=4 SK=4")
for pass in 1 2; do
  timeout 300 $W/ab $W/header.txt 9 "${CASES[@]}" >> $R/ab-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
