#!/bin/bash
# GPU call (2026-11-26 f1): the session's hardening on the H100: threads and contexts, argument
# checks on the device context, fallback, backward ops (fused norm backward builds first), the
# tensor-core kernels, CLBlast.
source .gpu/env.sh >/dev/null
export XDG_CACHE_HOME=/tmp/xdg; mkdir -p /tmp/xdg
R=$OUT/r; mkdir -p $R
clocks() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,clocks_event_reasons.active --format=csv,noheader; }
{ date -u; echo "commit: $(cat .gpu/work/commit)"; nvidia-smi --query-gpu=name,driver_version --format=csv; clocks; } > $R/machine.txt 2>&1
cd build-gpu
for t in "context 40" "dispatch_errors 40" "fallback 70" "tf32 80" "backward 110" "clblast 60"; do
  set -- $t
  s=$(date +%s.%N)
  timeout $2 ./tests/test_$1 > $R/test-$1.txt 2>&1
  echo "test_$1 rc $? $(echo "$(date +%s.%N) - $s" | bc) s" >> $R/summary.txt
done
cd ..
clocks >> $R/machine.txt
cd $OUT && tar czf r.tgz r && rm -rf r
