#!/bin/bash
# GPU call 1 (2026-11-27, third session): the layer norm backward's single pass, variants of
# its row arithmetic (bench-exp reads the rows_backward program from HD_EXP_ROWS_BACKWARD_SRC;
# an experiment build, not the library): cur (ded4d61), inv (the divisions by cols as
# multiplies by 1/cols, mean2's correction kept), inv_rsqrt (and rsqrt in scaled_rstd),
# norange (no largest magnitude and no range check), nocorr (mean2 without its correction),
# floor (inv_rsqrt and norange); bench-head = 14eaa86's build (before the any-magnitude fix).
# dispatch-bench on the train suite's norm shapes, fused, device mode, alternating, 2 passes.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
for pass in 1 2; do
  XDG_CACHE_HOME=/tmp/xdg-head timeout 60 $W/bench-head --shapes $W/norms.txt --backends fused --modes device --rounds 3 > $R/head-pass$pass.txt 2>&1
  for v in cur inv inv_rsqrt norange nocorr floor; do
    XDG_CACHE_HOME=/tmp/xdg-$v HD_EXP_ROWS_BACKWARD_SRC=$W/exp/$v.cl timeout 60 $W/exp/bench-exp --shapes $W/norms.txt --backends fused --modes device --rounds 3 > $R/$v-pass$pass.txt 2>&1
  done
done
cd $OUT && tar czf r.tgz r && rm -rf r
