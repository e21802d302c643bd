#!/bin/bash
# GPU call 7 (2026-11-27, second session): (1) half-fill products whose side falls just past a
# multiple of 128, narrow tiles against 14eaa86's defaults (ab-head), two passes; (2) the norm
# kernels' any-magnitude scaling: dispatch-bench on the train suite's norm shapes, fused,
# device mode, 14eaa86's build (bench-head) and this one alternating; (3) GPU tests.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-7
C=("gemm 257 4096 14336 nn" "gemm 257 4096 4096 nn" "gemm 257 4096 4096 nt" "gemm 257 4096 4096 tn"
   "gemm 2000 560 2048 nn" "gemm 2000 560 2048 tn" "gemm 3000 300 1024 nn" "gemm 4096 257 1024 nn"
   "gemm 700 1700 1500 nn" "gemm 260 4000 2048 nt" "gemm 257 4096 512 nn" "lora 257 4096 14336 16"
   "gemm 385 4096 4096 nn")
for pass in 1 2; do
  timeout 100 $W/ab-head $W/header.txt 9 "${C[@]}" >> $R/ab-head-pass$pass.txt 2>&1
  timeout 100 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-new-pass$pass.txt 2>&1
done
for pass in 1 2; do
  timeout 60 $W/bench-head --shapes $W/norms.txt --backends fused --modes device --rounds 3 > $R/norms-head-pass$pass.txt 2>&1
  timeout 60 $W/bin-new/dispatch-bench --shapes $W/norms.txt --backends fused --modes device --rounds 3 > $R/norms-new-pass$pass.txt 2>&1
done
timeout 150 $W/bin-new/test_backward > $R/test_backward.txt 2>&1; echo "rc $?" >> $R/test_backward.txt
for t in test_norms_extreme_magnitudes_match_reference test_softmax_masked_rows_every_kernel test_gemm_tile_defaults test_gemm_tiles_every_variant_and_transpose test_gemm_random_shapes_match_reference test_row_ops_every_variant test_lora_tiles_match_reference; do
  HD_TEST_FILTER=$t timeout 120 $W/bin-new/test_fused >> $R/test_fused.txt 2>&1; echo "$t rc $?" >> $R/test_fused.txt
done
cd $OUT && tar czf r.tgz r && rm -rf r
