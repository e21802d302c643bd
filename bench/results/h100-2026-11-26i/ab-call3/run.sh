#!/bin/bash
# GPU call 3 (2026-11-26 s3): test_fused on the real instructions at the new defaults; the
# defaults of HEAD (head) against the new ones (new), alternating, one context per case.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
clocks() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv,noheader; }
{ date -u; echo "commit: $(cat .gpu/work/commit) (head) and the working tree (new)"; nvidia-smi --query-gpu=name,driver_version --format=csv; clocks; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-t; mkdir -p $XDG_CACHE_HOME
(cd build-gpu && timeout 330 ./tests/test_fused) > $R/test_fused.txt 2>&1; echo "rc $?" >> $R/test_fused.txt
clocks >> $R/machine.txt
H="timeout 200 .gpu/work/ab-head .gpu/work/header.txt 9"
N="timeout 200 .gpu/work/ab-exp .gpu/work/header.txt 9"
C=("gemm 4096 4096 4096 nn" "gemm 4096 4096 4096 nt" "gemm 4096 4096 4096 tn" "gemm 4096 4096 4096 tt"
   "gemm 8192 4096 4096 nn" "gemm 8192 4096 4096 tn" "lorab 4096 4096 4096 16" "gemm 4096 520 1032 tn"
   "gemm 4093 521 1031 tn" "gemm 2048 11008 4096 nn" "gemm 1024 4096 14336 nt" "gemm 512 4096 4096 nt"
   "gemm 3000 3000 3000 nn" "gemm 11008 4096 2048 tn" "gemm 8192 3584 1024 nn")
for pass in 1 2; do
  export XDG_CACHE_HOME=/tmp/xdg-h; $H "${C[@]}" >> $R/defaults-head.txt 2>&1
  export XDG_CACHE_HOME=/tmp/xdg-n; $N "${C[@]}" >> $R/defaults-new.txt 2>&1
done
T="BM=128 BN=16 BK=16 RM=8 RN=4"
THIN=("gemm 4096 16 4096 nt" "gemm 4096 16 4096 nt $T SK=8" "gemm 4096 16 4096 nt $T SK=32" "gemm 4096 16 4096 nt BM=256 BN=16 BK=16 RM=16 RN=4 SK=16"
      "gemm 4096 16 4096 nt BM=128 BN=16 BK=32 RM=8 RN=4 SK=16" "gemm 4096 16 4096 nt BM=64 BN=16 BK=16 RM=4 RN=4 SK=16"
      "gemm 4096 16 4096 nn" "gemm 4096 16 4096 nn $T SK=16 ASYNC=3" "gemm 4096 16 4096 nn $T SK=32 ASYNC=3" "gemm 4096 16 4096 nn $T SK=8"
      "gemm 4096 16 4096 tn" "gemm 4096 16 4096 tn $T SK=16 ASYNC=3" "gemm 4096 16 4096 tn $T SK=32 ASYNC=3" "gemm 4096 16 4096 tn BM=256 BN=16 BK=16 RM=16 RN=4 SK=16 ASYNC=3"
      "gemm 16 4096 4096 tn" "gemm 16 4096 4096 tn BM=16 BN=128 BK=16 RM=4 RN=8 SK=16 ASYNC=3" "gemm 16 4096 4096 tn BM=16 BN=256 BK=16 RM=4 RN=16 SK=16 ASYNC=3"
      "gemm 16 4096 4096 tn BM=16 BN=128 BK=16 RM=4 RN=8 SK=32")
export XDG_CACHE_HOME=/tmp/xdg-n; $N "${THIN[@]}" > $R/thin.txt 2>&1
clocks >> $R/machine.txt
cd $OUT && tar czf r.tgz r && rm -rf r
