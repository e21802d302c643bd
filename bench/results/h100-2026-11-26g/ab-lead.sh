#!/bin/bash
# GPU call (2026-11-26 g2): the FMA kernel's register-staged operands loaded two stages ahead
# (LEAD=2) against one (the same variant without it), 4096^3 in each transpose and a few
# shapes of the suites; the new test on the real cp.async; ptxas registers.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
clocks() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,clocks_event_reasons.active --format=csv,noheader; }
{ date -u; echo "commit: $(cat .gpu/work/commit) + LEAD (uncommitted)"; nvidia-smi --query-gpu=name,driver_version --format=csv; clocks; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-t; mkdir -p $XDG_CACHE_HOME
(cd build-gpu && HD_TEST_FILTER='*lead*' timeout 100 ./tests/test_fused) > $R/test-lead.txt 2>&1; echo "rc $?" >> $R/test-lead.txt
export XDG_CACHE_HOME=/tmp/xdg-ab; mkdir -p $XDG_CACHE_HOME
AB=".gpu/work/ab/ab-head .gpu/work/ab/header-eb10d44.txt 7"
for pass in 1 2; do
for v in "BM=128 BN=128 BK=8 RM=16 RN=8" "BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2" \
         "BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=3" "BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=3 LEAD=2" \
         "BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=4 LEAD=2" \
         "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3" "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3 LEAD=2" \
         "BM=128 BN=128 BK=16 RM=8 RN=16 ASYNC=2 LEAD=2" "BM=128 BN=128 BK=8 RM=8 RN=8 ASYNC=4 LEAD=2"; do
  timeout 60 $AB "4096 4096 4096 nn $v" "4096 4096 4096 nt $v" "4096 4096 4096 tn $v" "4096 4096 4096 tt $v" \
     "8192 4096 4096 nn $v" "1536 4096 4096 nt $v" "3000 3000 3000 nn $v" >> $R/ab-lead-$pass.txt 2>&1
done
done
clocks >> $R/machine.txt
PTXAS=/usr/local/cuda/bin/ptxas timeout 60 python3 .gpu/work/ptx_info.py $XDG_CACHE_HOME/hd-dispatch/programs > $R/ptxas.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
