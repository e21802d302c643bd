#!/bin/bash
# GPU call 11 (2026-11-27, second session): as call 10, the range check read inside the
# first tree (no barrier of its own); call 10: the single pass summing unscaled
# with the row's largest magnitude in its first tree, and again scaled only where a row of the
# work-group is out of range; call 9: the powers of two built from their
# bits in place of ldexp (call 8: twice as slow); the norm kernels with each work-item's exponent
# carried through the trees (no tree of its own for the scaling) and mean2's corrected
# quotient: dispatch-bench on the train suite's norm shapes, fused, device mode, 14eaa86's
# build (bench-head) and this one alternating, three passes; then the GPU tests of the norms.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-11
for pass in 1 2 3; do
  timeout 60 $W/bench-head --shapes $W/norms.txt --backends fused --modes device --rounds 3 > $R/norms-head-pass$pass.txt 2>&1
  timeout 60 $W/bin-new/dispatch-bench --shapes $W/norms.txt --backends fused --modes device --rounds 3 > $R/norms-new-pass$pass.txt 2>&1
done
timeout 150 $W/bin-new/test_backward > $R/test_backward.txt 2>&1; echo "rc $?" >> $R/test_backward.txt
for t in test_norms_extreme_magnitudes_match_reference test_layer_norm_matches_reference test_rms_norm_matches_reference test_row_ops_random_shapes_match_reference test_row_ops_every_variant test_softmax_masked_rows_every_kernel; do
  HD_TEST_FILTER=$t timeout 120 $W/bin-new/test_fused >> $R/test_fused.txt 2>&1; echo "$t rc $?" >> $R/test_fused.txt
done
cd $OUT && tar czf r.tgz r && rm -rf r
