#!/bin/bash
# GPU call 1 (2026-11-27, fourth session): L2 prefetch (PF=N: each stage asks L2 for the stage
# N past the one multiplied) against none, on the defaults of tf32, fp32 and fp32x3.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-12
T=(); F=(); X=()
for s in "4096 4096 4096 nn" "4096 4096 4096 nt" "4096 4096 4096 tn" "8192 8192 8192 nn"; do
  for v in "" "PF=3" "PF=4" "PF=5" "PF=6" "PF=8"; do T+=("gemm $s $v"); done
done
for s in "4096 4096 4096 nn" "4096 4096 4096 nt" "4096 4096 4096 tn" "8192 4096 4096 nn" "2048 11008 4096 nn" "1024 4096 14336 nt" "512 4096 4096 nt"; do
  for v in "" "PF=2" "PF=3" "PF=4" "PF=6"; do F+=("gemm $s $v"); done
done
for v in "" "BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2" "BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2 PF=3" "BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2 PF=4"; do F+=("lora 4096 4096 4096 16 $v"); done
for s in "4096 4096 4096 nn" "8192 8192 8192 nn"; do
  for v in "" "PF=3" "PF=4" "PF=6"; do X+=("gemm $s $v"); done
done
for pass in 1 2; do
  HD_GEMM_PRECISION=tf32 timeout 150 $W/ab $W/header.txt 9 "${T[@]}" >> $R/tf32-pass$pass.txt 2>&1
  timeout 150 $W/ab $W/header.txt 9 "${F[@]}" >> $R/fp32-pass$pass.txt 2>&1
  HD_GEMM_PRECISION=fp32x3 timeout 60 $W/ab $W/header.txt 9 "${X[@]}" >> $R/fp32x3-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
