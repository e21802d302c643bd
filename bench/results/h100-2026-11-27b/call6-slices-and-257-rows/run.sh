#!/bin/bash
# GPU call 6 (2026-11-27, second session): (A) products of one 64 x 128 tile a unit or fewer,
# about 1000 deep, against 128 x 128 tiles cut in 2 to 4 slices; (B) products of 257 and 385
# rows (one past a multiple of 128) against narrow tiles, cut or not; (C) 8192 x 512 x 512.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-6
C=()
for s in "1024 1024 1024 nn" "1024 1024 1024 tn" "1024 1024 1024 nt" "1000 1000 1000 nn" "768 1280 1024 nn" "2048 512 1024 nn" "997 1009 1013 nn"; do
  for v in "" "BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2 SK=2" "BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2 SK=3" "BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2 SK=4" "BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2 SK=4"; do C+=("gemm $s $v"); done
done
C+=("gemm 1024 1024 1024 tn BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5 SK=4" "gemm 1024 1024 1024 tn BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5 SK=2")
for s in "257 4096 14336 nn" "257 4096 4096 nn" "385 4096 4096 nn"; do
  for v in "" "BM=96 BN=64 BK=16 RM=12 RN=4 SK=2" "BM=96 BN=64 BK=16 RM=12 RN=4 ASYNC=3 SK=2" "BM=96 BN=64 BK=16 RM=12 RN=4 ASYNC=3" "BM=96 BN=128 BK=16 RM=12 RN=8 SK=2" "BM=64 BN=96 BK=16 RM=4 RN=12 ASYNC=3 SK=2"; do C+=("gemm $s $v"); done
done
C+=("lora 257 4096 14336 16")
for v in "" "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3" "BM=128 BN=64 BK=16 RM=16 RN=4" "BM=128 BN=64 BK=16 RM=16 RN=4 ASYNC=3" "BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2" "BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=4"; do C+=("gemm 8192 512 512 nn $v"); done
for pass in 1 2; do
  timeout 260 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
