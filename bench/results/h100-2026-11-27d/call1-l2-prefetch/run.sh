#!/bin/bash
# GPU call 2 (2026-11-27, fourth session): L2 prefetch (PF=N) against none on the tf32
# warpgroup kernel's and fp32x3's defaults, named in full (call 1's short variants were not
# tile variants, and its tf32 records lacked the precision key).
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-13
T=(); F=(); X=()
W16="BM=128 BN=256 BK=16 WN=256 ASYNC=3 AREG=1 WGMMA=1"; W8="BM=128 BN=256 BK=8 WN=256 ASYNC=6 AREG=1 WGMMA=1"
for pf in "" " PF=3" " PF=4" " PF=6" " PF=8"; do
  T+=("gemm 4096 4096 4096 nn $W16$pf" "gemm 4096 4096 4096 tn $W16$pf" "gemm 4096 4096 4096 nt $W8$pf" "gemm 8192 8192 8192 nn $W16$pf")
done
for pf in "" " PF=3" " PF=5"; do
  X+=("gemm 4096 4096 4096 nn BM=64 BN=128 BK=16 WM=32 WN=64 ASYNC=4$pf")
  F+=("gemm 4096 4096 4096 nn BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2$pf" "gemm 4096 4096 4096 tn BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5$pf")
done
for pass in 1 2; do
  HD_GEMM_PRECISION=tf32 timeout 100 $W/ab $W/header.txt 9 "${T[@]}" >> $R/tf32-pass$pass.txt 2>&1
  timeout 60 $W/ab $W/header.txt 9 "${F[@]}" >> $R/fp32-pass$pass.txt 2>&1
  HD_GEMM_PRECISION=fp32x3 timeout 40 $W/ab $W/header.txt 9 "${X[@]}" >> $R/fp32x3-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
