#!/bin/bash
# GPU call (2026-11-26 g1): does the fp32 tile kernel lose its last partial wave? Times of
# M x 4096 x 4096 NN for M on both sides of whole waves, per tile variant (ab harness: exact
# tuning record per case), the split-K pieces a band split would add, and ptxas registers.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
clocks() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,clocks_event_reasons.active --format=csv,noheader; }
{ date -u; echo "commit: $(cat .gpu/work/commit)"; nvidia-smi --query-gpu=name,driver_version --format=csv; clocks; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-ab; mkdir -p $XDG_CACHE_HOME
AB=".gpu/work/ab/ab-head .gpu/work/ab/header-eb10d44.txt 9"
V1="BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3"
V2="BM=128 BN=128 BK=8 RM=16 RN=8"
V3="BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=3"
c=()
for m in 3136 3200 3584 3904 3968 4032 4096 7872 8192; do c+=("$m 4096 4096 nn $V1"); done
for m in 3904 4096; do c+=("$m 4096 4096 tn $V1"); done
for t in "192 4096 4096 nn" "256 4096 4096 nn" "320 4096 4096 nn"; do for s in 2 4 6; do c+=("$t $V1 SK=$s"); done; done
timeout 150 $AB "${c[@]}" > $R/waves-v1.txt 2>&1; echo "rc $?" >> $R/waves-v1.txt
c=()
for m in 2048 2112 3072 3200 3840 4096 4224 4352; do c+=("$m 4096 4096 nn $V2"); done
for m in 3072 3200 4096 4224; do c+=("$m 4096 4096 nn $V3"); done
timeout 120 $AB "${c[@]}" > $R/waves-v2.txt 2>&1; echo "rc $?" >> $R/waves-v2.txt
clocks >> $R/machine.txt
PTXAS=/usr/local/cuda/bin/ptxas timeout 60 python3 .gpu/work/ptx_info.py $XDG_CACHE_HOME/hd-dispatch/programs > $R/ptxas.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
