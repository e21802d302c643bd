#!/bin/bash
# GPU call 4 (2026-11-27, fourth session): the tf32 warpgroup kernel with A's fragments
# truncated before each stage's fence (lib-new) against 21433b3 (lib-head) on the defaults,
# and tiles of three warpgroups (BM=192); ptxas on the warpgroup programs; the tensor-core tests.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
D=("gemm 4096 4096 4096 nn" "gemm 4096 4096 4096 tn" "gemm 4096 4096 4096 nt" "gemm 8192 8192 8192 nn")
N=()
for v in "BM=192 BN=256 BK=16 WN=256 ASYNC=3 AREG=1 WGMMA=1" "BM=192 BN=256 BK=8 WN=256 ASYNC=5 AREG=1 WGMMA=1" "BM=192 BN=256 BK=8 WN=256 ASYNC=6 AREG=1 WGMMA=1"; do
  for s in "4096 4096 4096 nn" "4096 4096 4096 nt" "8192 8192 8192 nn"; do N+=("gemm $s $v"); done
done
export HD_GEMM_PRECISION=tf32
for pass in 1 2; do
  XDG_CACHE_HOME=/tmp/xdg-h timeout 60 $W/ab-head $W/header.txt 9 "${D[@]}" >> $R/ab-head-pass$pass.txt 2>&1
  XDG_CACHE_HOME=/tmp/xdg-n timeout 60 $W/ab $W/header.txt 9 "${D[@]}" >> $R/ab-new-pass$pass.txt 2>&1
done
XDG_CACHE_HOME=/tmp/xdg-n timeout 120 $W/ab $W/header.txt 9 "${N[@]}" >> $R/ab-bm192.txt 2>&1
for d in h n; do KERNEL=gemm_wgmma PTXAS=/usr/local/cuda/bin/ptxas timeout 60 python3 $W/ptx_info2.py /tmp/xdg-$d/hd-dispatch/programs > $R/ptxas-$d.txt 2>&1; done
unset HD_GEMM_PRECISION
export XDG_CACHE_HOME=/tmp/xdg-t POCL_CACHE_DIR=/tmp/pocl-t HD_TUNE_CACHE=/tmp/none
HD_TEST_FILTER="*tensor_core*" timeout 150 $W/bin-new/test_fused > $R/test_fused-tensor-core.txt 2>&1; echo "rc $?" >> $R/test_fused-tensor-core.txt
HD_TEST_FILTER="*tf32*" timeout 60 $W/bin-new/test_fused > $R/test_fused-tf32.txt 2>&1; echo "rc $?" >> $R/test_fused-tf32.txt
cd $OUT && tar czf r.tgz r && rm -rf r
