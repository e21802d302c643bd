#!/bin/bash
# GPU call 2 (2026-11-27, second session): the narrow tiles (64 x 96 of 4 x 12, 96 x 64 of
# 12 x 4) where the new default takes them, against the previous defaults (ab-head, the
# library of the last commit), two passes each; then the GPU tests touched by this session's
# changes (softmax masks, tile variants and defaults, pinned memory, LoRA).
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-2
C=("gemm 4093 521 1031 tn" "gemm 4093 521 1031 nn" "gemm 4093 521 1031 nt" "gemm 521 4093 1031 nn"
   "gemm 6130 370 2048 nn" "gemm 3620 609 1024 tn" "gemm 1499 1435 1024 nn" "gemm 513 4096 4096 nn"
   "gemm 257 8192 4096 nn" "gemm 257 11008 4096 nn" "gemm 1025 3072 4096 nt" "gemm 2970 761 1500 tn"
   "gemm 7239 264 2048 nn" "gemm 2244 1018 1024 tn" "gemm 461 4422 4096 nt" "lora 513 4096 4096 16"
   "gemm 4096 4096 4096 nn")
for pass in 1 2; do
  timeout 120 $W/ab-head $W/header.txt 9 "${C[@]}" >> $R/ab-head-pass$pass.txt 2>&1
  timeout 120 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-new-pass$pass.txt 2>&1
done
( time timeout 280 build-gpu/tests/test_fused ) > $R/test_fused.txt 2>&1; echo "rc $?" >> $R/test_fused.txt
for t in test_backward test_opencl_runtime test_lora_layout test_cpu_ops; do
  timeout 100 build-gpu/tests/$t > $R/$t.txt 2>&1; echo "rc $?" >> $R/$t.txt
done
cd $OUT && tar czf r.tgz r && rm -rf r
