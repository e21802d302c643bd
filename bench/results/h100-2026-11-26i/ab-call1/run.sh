#!/bin/bash
# GPU call 1 (2026-11-26 s1): LoRA backward's time by product; the FMA kernel with unpadded
# depth-major operands and up to 8 cp.async buffers (exp) against HEAD (head); tile variants
# on a skewed misaligned TN shape.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
clocks() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv,noheader; }
{ date -u; echo "commit: $(cat .gpu/work/commit) (head) and the same + unpadded depth-major stages, ASYNC to 8 (exp)"; nvidia-smi --query-gpu=name,driver_version --format=csv; clocks; } > $R/machine.txt 2>&1
H="timeout 120 .gpu/work/ab-head .gpu/work/header.txt 9"
E="timeout 120 .gpu/work/ab-exp .gpu/work/header.txt 9"
export XDG_CACHE_HOME=/tmp/xdg-h; mkdir -p $XDG_CACHE_HOME
$H "lorab 4096 4096 4096 16" "lorab0 4096 4096 4096 16" "gemm 4096 4096 4096 nt" "gemm 4096 16 4096 nt" \
   "gemm 4096 16 4096 nn" "gemm 4096 16 4096 tn" "gemm 16 4096 4096 tn" "lorab 4096 4096 4096 16" > $R/breakdown.txt 2>&1
clocks >> $R/machine.txt
V8="BM=128 BN=128 BK=8 RM=16 RN=8"; V16="BM=128 BN=128 BK=16 RM=16 RN=8"
BOTH=("gemm 4096 4096 4096 tn $V8 ASYNC=3" "gemm 4096 4096 4096 nn $V8 LEAD=2" "gemm 4096 4096 4096 nt $V8 LEAD=2"
      "gemm 4096 4096 4096 tt $V8 LEAD=2" "gemm 4096 4096 4096 nn $V16 LEAD=2" "gemm 4096 4096 4096 nt $V16 LEAD=2"
      "gemm 4096 4096 4096 nt $V16" "gemm 4096 4096 4096 nn $V16")
EXP=("gemm 4096 4096 4096 tn $V16 ASYNC=3" "gemm 4096 4096 4096 tn $V8 ASYNC=5" "gemm 4096 4096 4096 tn $V8 ASYNC=6"
     "gemm 4096 4096 4096 tn BM=128 BN=128 BK=16 RM=8 RN=16 ASYNC=3" "gemm 4096 4096 4096 tn $V16 ASYNC=2"
     "gemm 4096 4096 4096 nn $V8 ASYNC=5" "gemm 4096 4096 4096 tt $V8 ASYNC=5"
     "gemm 8192 4096 4096 tn $V16 ASYNC=3" "gemm 8192 4096 4096 tn $V8 ASYNC=3"
     "lorab 4096 4096 4096 16 $V16 LEAD=2" "lorab 4096 4096 4096 16 $V8 LEAD=2"
     "gemm 512 4096 4096 nt $V16 LEAD=2" "gemm 512 4096 4096 nt $V8 LEAD=2" "gemm 1024 4096 14336 nt $V16 LEAD=2" "gemm 1024 4096 14336 nt")
for pass in 1 2; do
  export XDG_CACHE_HOME=/tmp/xdg-h; $H "${BOTH[@]}" >> $R/ab-head-$pass.txt 2>&1
  export XDG_CACHE_HOME=/tmp/xdg-e; $E "${BOTH[@]}" "${EXP[@]}" >> $R/ab-exp-$pass.txt 2>&1
done
clocks >> $R/machine.txt
export XDG_CACHE_HOME=/tmp/xdg-h
$H "gemm 4093 521 1031 tn" "gemm 4093 521 1031 tn BM=64 BN=128 BK=16 RM=8 RN=8" "gemm 4093 521 1031 tn BM=64 BN=128 BK=16 RM=8 RN=8 LEAD=2" \
   "gemm 4093 521 1031 tn $V8 LEAD=2" "gemm 4093 521 1031 tn BM=64 BN=64 BK=16 RM=4 RN=4" "gemm 4093 521 1031 tn BM=128 BN=64 BK=16 RM=8 RN=8" \
   "gemm 4093 521 1031 tn BM=64 BN=64 BK=8 RM=8 RN=8" "gemm 4093 521 1031 tn BM=64 BN=128 BK=16 RM=8 RN=8 SK=2" \
   "gemm 4096 520 1032 tn" "gemm 4096 520 1032 tn BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3" "gemm 4096 520 1032 tn BM=64 BN=128 BK=16 RM=8 RN=8" \
   "gemm 127 4099 2053 nt" "gemm 127 4099 2053 nt BM=64 BN=64 BK=16 RM=4 RN=4 SK=4" "gemm 127 4099 2053 nt BM=32 BN=64 BK=16 RM=4 RN=4 SK=4" > $R/skewed.txt 2>&1
for d in /tmp/xdg-h /tmp/xdg-e; do echo "== $d"; PTXAS=/usr/local/cuda/bin/ptxas timeout 90 python3 .gpu/work/ptx_info.py $d/hd-dispatch/programs; done > $R/ptxas.txt 2>&1
clocks >> $R/machine.txt
cd $OUT && tar czf r.tgz r && rm -rf r
