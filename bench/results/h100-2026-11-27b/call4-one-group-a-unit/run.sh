#!/bin/bash
# GPU call 4 (2026-11-27, second session): products whose 64 x 128 tiles come to about one
# group per unit or fewer (the half-fill class at one group a unit), against 128 x 64 tiles of
# 16 x 4 results per work-item (1024^3 NN: 66 us against the default's 76 in call 3), 128 x 64
# of 8 x 8 and 64 x 64 of 4 x 8.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-4
C=()
for s in "1024 1024 1024 nn" "1024 1024 1024 tn" "1024 1024 1024 tt" "1024 1024 2048 nn" "1024 1024 512 nn" "960 1024 1024 nn" "1024 896 1024 nt" "1000 1000 1000 nn" "768 1280 1024 nn" "2048 512 1024 nn" "512 2048 1024 nn" "997 1009 1013 nt" "1024 1024 4096 nn"; do
  for v in "" "BM=128 BN=64 BK=16 RM=16 RN=4" "BM=128 BN=64 BK=16 RM=16 RN=4 ASYNC=3" "BM=128 BN=64 BK=16 RM=16 RN=4 SK=2" "BM=128 BN=64 BK=16 RM=8 RN=8" "BM=64 BN=64 BK=16 RM=4 RN=8" "BM=64 BN=128 BK=16 RM=8 RN=8"; do
    case "$s $v" in *nt*ASYNC*|*tt*ASYNC*) continue;; esac
    C+=("gemm $s $v")
  done
done
for pass in 1 2; do
  timeout 200 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
