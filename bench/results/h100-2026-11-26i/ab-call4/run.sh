#!/bin/bash
# GPU call 4 (2026-11-26 s4): test_fused on the real instructions at the new defaults; the
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
V8="BM=128 BN=128 BK=8 RM=16 RN=8"
X=("lorab0 4096 4096 4096 16" "gemm 4096 16 4096 nt" "gemm 4096 16 4096 nn" "gemm 4096 16 4096 tn" "gemm 16 4096 4096 tn"
   "gemm 11008 4096 2048 tn $V8 ASYNC=3" "gemm 11008 4096 2048 tn $V8 ASYNC=5" "gemm 1024 4096 14336 nt $V8 LEAD=2"
   "gemm 2048 16 4096 nt" "gemm 2048 16 4096 nn" "gemm 16 4096 2048 nt" "gemm 16 11008 4096 tn" "gemm 4096 8 11008 nt")
for pass in 1 2; do
  export XDG_CACHE_HOME=/tmp/xdg-h; $H "${X[@]}" >> $R/extra-head.txt 2>&1
  export XDG_CACHE_HOME=/tmp/xdg-n; $N "${X[@]}" >> $R/extra-new.txt 2>&1
done
clocks >> $R/machine.txt
cd $OUT && tar czf r.tgz r && rm -rf r
