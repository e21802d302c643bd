#!/bin/bash
# GPU call 2 (2026-11-26 s2): as call 1, one context and one tuning record per case (call 1's
# harness kept one record per shape, so its variants of a shape all ran one variant).
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
clocks() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv,noheader; }
{ date -u; echo "commit: $(cat .gpu/work/commit) (head) and the same + unpadded depth-major stages, ASYNC to 8 (exp)"; nvidia-smi --query-gpu=name,driver_version --format=csv; clocks; } > $R/machine.txt 2>&1
H="timeout 200 .gpu/work/ab-head .gpu/work/header.txt 9"
E="timeout 200 .gpu/work/ab-exp .gpu/work/header.txt 9"
V8="BM=128 BN=128 BK=8 RM=16 RN=8"; V16="BM=128 BN=128 BK=16 RM=16 RN=8"
LB=("lorab 4096 4096 4096 16" "lorab0 4096 4096 4096 16" "gemm 4096 16 4096 nt" "gemm 4096 16 4096 nn" "gemm 4096 16 4096 tn" "gemm 16 4096 4096 tn")
BOTH=("gemm 4096 4096 4096 tn $V8 ASYNC=3" "gemm 4096 4096 4096 nn $V8 LEAD=2" "gemm 4096 4096 4096 nt $V8 LEAD=2"
      "gemm 4096 4096 4096 nn $V16 LEAD=2" "gemm 4096 4096 4096 nt $V16 LEAD=2" "gemm 4096 4096 4096 nt $V16" "gemm 4096 4096 4096 nn $V16")
EXP=("gemm 4096 4096 4096 tn $V16 ASYNC=3" "gemm 4096 4096 4096 tn $V8 ASYNC=5" "gemm 4096 4096 4096 tn $V8 ASYNC=6"
     "gemm 4096 4096 4096 tn BM=128 BN=128 BK=16 RM=8 RN=16 ASYNC=3" "gemm 4096 4096 4096 tn $V16 ASYNC=2"
     "gemm 4096 4096 4096 nn $V8 ASYNC=5" "gemm 8192 4096 4096 tn $V16 ASYNC=3" "gemm 8192 4096 4096 tn $V8 ASYNC=3")
for pass in 1 2; do
  export XDG_CACHE_HOME=/tmp/xdg-h; $H "${LB[@]}" >> $R/lb-head.txt 2>&1
  export XDG_CACHE_HOME=/tmp/xdg-e; $E "${LB[@]}" >> $R/lb-exp.txt 2>&1
done
clocks >> $R/machine.txt
for pass in 1 2; do
  export XDG_CACHE_HOME=/tmp/xdg-h; $H "${BOTH[@]}" >> $R/ab-head.txt 2>&1
  export XDG_CACHE_HOME=/tmp/xdg-e; $E "${BOTH[@]}" "${EXP[@]}" >> $R/ab-exp.txt 2>&1
done
clocks >> $R/machine.txt
export XDG_CACHE_HOME=/tmp/xdg-h
$H "gemm 4093 521 1031 tn" "gemm 4093 521 1031 tn BM=64 BN=128 BK=16 RM=8 RN=8" "gemm 4093 521 1031 tn BM=64 BN=128 BK=16 RM=8 RN=8 LEAD=2" \
   "gemm 4093 521 1031 tn $V8 LEAD=2" "gemm 4093 521 1031 tn BM=64 BN=64 BK=16 RM=4 RN=4" "gemm 4093 521 1031 tn BM=128 BN=64 BK=16 RM=8 RN=8" \
   "gemm 4093 521 1031 tn BM=64 BN=64 BK=8 RM=8 RN=8" "gemm 4093 521 1031 tn BM=64 BN=128 BK=16 RM=8 RN=8 SK=2" \
   "gemm 4096 520 1032 tn" "gemm 4096 520 1032 tn BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3" "gemm 4096 520 1032 tn BM=64 BN=128 BK=16 RM=8 RN=8" \
   "gemm 4096 520 1032 tn BM=128 BN=64 BK=16 RM=8 RN=8 ASYNC=3" > $R/skewed.txt 2>&1
for d in /tmp/xdg-h /tmp/xdg-e; do echo "== $d"; PTXAS=/usr/local/cuda/bin/ptxas timeout 90 python3 .gpu/work/ptx_info.py $d/hd-dispatch/programs; done > $R/ptxas.txt 2>&1
clocks >> $R/machine.txt
cd $OUT && tar czf r.tgz r && rm -rf r
