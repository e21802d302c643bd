#!/bin/bash
# GPU call 5 (2026-11-27, fourth session): tiles of three warpgroups (BM=192) with the
# registers bounded for 384 work-items (REG=168), against the default 128 x 256; ptxas (sm_90a)
# registers of the warpgroup programs.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
N=()
for s in "4096 4096 4096 nn" "4096 4096 4096 nt" "8192 8192 8192 nn"; do
  N+=("gemm $s")
  for v in "BM=192 BN=256 BK=16 WN=256 ASYNC=3 AREG=1 WGMMA=1" "BM=192 BN=256 BK=16 WN=256 ASYNC=3 AREG=1 WGMMA=1 REG=168" "BM=192 BN=256 BK=8 WN=256 ASYNC=5 AREG=1 WGMMA=1 REG=168"; do N+=("gemm $s $v"); done
done
export HD_GEMM_PRECISION=tf32 XDG_CACHE_HOME=/tmp/xdg-n
timeout 150 $W/ab $W/header.txt 9 "${N[@]}" >> $R/ab-bm192.txt 2>&1
ARCH=-arch=sm_90a KERNEL=gemm_wgmma PTXAS=/usr/local/cuda/bin/ptxas timeout 60 python3 $W/ptx_info2.py /tmp/xdg-n/hd-dispatch/programs > $R/ptxas.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
