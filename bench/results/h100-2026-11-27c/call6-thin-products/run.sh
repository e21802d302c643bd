#!/bin/bash
# GPU call 6 (2026-11-27, third session): thin products (one side at most 32) on thin tiles
# whatever their long side and depth, where the half-fill and large rules gave them square
# tiles: ab (new library) against ab-head (b817c3c), alternating, two passes; LoRA and LoRA
# backward of 8192 tokens, whose x*A and rank-r products are such; then the GPU tests of the
# tiles, LoRA and backward.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-6
C=("gemm 8192 16 4096 nn" "gemm 8192 8 1024 nn" "gemm 8192 4 512 nn" "gemm 16384 16 4096 nn" "gemm 8192 16 8192 tn" "gemm 16 8192 8192 tn" "gemm 100 8 512 nn" "gemm 1000 7 100 nn" "lora 8192 1024 2816 8" "lora 8192 512 512 4" "lorab 8192 4096 4096 16" "lorab 4096 4096 4096 16" "lora 4096 4096 4096 16")
for pass in 1 2; do
  timeout 100 $W/ab-head $W/header.txt 9 "${C[@]}" >> $R/ab-head-pass$pass.txt 2>&1
  timeout 100 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-new-pass$pass.txt 2>&1
done
export XDG_CACHE_HOME=/tmp/xdg-tests
timeout 120 $W/bin-new/test_backward > $R/test_backward.txt 2>&1; echo "rc $?" >> $R/test_backward.txt
for t in "test_gemm_*" "test_lora_*"; do
  HD_TEST_FILTER="$t" timeout 100 $W/bin-new/test_fused >> $R/test_fused.txt 2>&1; echo "$t rc $?" >> $R/test_fused.txt
done
cd $OUT && tar czf r.tgz r && rm -rf r
