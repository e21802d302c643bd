#!/bin/bash
# GPU call 2 (2026-11-27, third session): the norm backward's single pass summing unscaled
# and checking its sums (slot_sum4_checked), divisions by cols as multiplies: dispatch-bench on
# the train suite's norm shapes, fused, device mode, 14eaa86's build (bench-head, before the
# any-magnitude fix), ded4d61's (bench-exp, its embedded kernels) and the new one alternating,
# three passes; then the GPU tests of the norms.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
for pass in 1 2 3; do
  XDG_CACHE_HOME=/tmp/xdg-head timeout 60 $W/bench-head --shapes $W/norms.txt --backends fused --modes device --rounds 3 > $R/head-pass$pass.txt 2>&1
  XDG_CACHE_HOME=/tmp/xdg-prev timeout 60 $W/exp/bench-exp --shapes $W/norms.txt --backends fused --modes device --rounds 3 > $R/prev-pass$pass.txt 2>&1
  XDG_CACHE_HOME=/tmp/xdg-new timeout 60 $W/bin-new/dispatch-bench --shapes $W/norms.txt --backends fused --modes device --rounds 3 > $R/new-pass$pass.txt 2>&1
done
export XDG_CACHE_HOME=/tmp/xdg-tests
timeout 150 $W/bin-new/test_backward > $R/test_backward.txt 2>&1; echo "rc $?" >> $R/test_backward.txt
for t in test_norms_extreme_magnitudes_match_reference test_layer_norm_matches_reference test_rms_norm_matches_reference test_row_ops_random_shapes_match_reference test_row_ops_every_variant; do
  HD_TEST_FILTER=$t timeout 120 $W/bin-new/test_fused >> $R/test_fused.txt 2>&1; echo "$t rc $?" >> $R/test_fused.txt
done
cd $OUT && tar czf r.tgz r && rm -rf r
