#!/bin/bash
# GPU call 7 (2026-11-27, fourth session): test_backward and test_fused's row-op and norm tests
# on the H100 at the session's last kernels (21433b3's scale_held_row), and the norm shapes timed.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-t HD_TUNE_CACHE=/tmp/none
timeout 250 $W/bin-new/test_backward > $R/test_backward.txt 2>&1; echo "rc $?" >> $R/test_backward.txt
HD_TEST_FILTER="*norm*" timeout 120 $W/bin-new/test_fused > $R/test_fused-norm.txt 2>&1; echo "rc $?" >> $R/test_fused-norm.txt
HD_TEST_FILTER="*softmax*" timeout 60 $W/bin-new/test_fused > $R/test_fused-softmax.txt 2>&1; echo "rc $?" >> $R/test_fused-softmax.txt
timeout 60 $W/mjbuild/bench/dispatch-bench --shapes $W/norms.txt (norms-shapes.txt here) --backends fused --modes device --rounds 3 > $R/norms.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
