#!/bin/bash
# GPU call 6 (2026-11-26 s6): the defaults of 6c5aed5 (head) against the session's last code
# (new), alternating, one context per case.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
clocks() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv,noheader; }
{ date -u; echo "commit: 6c5aed5 (head) and $(cat .gpu/work/commit) (new)"; nvidia-smi --query-gpu=name,driver_version --format=csv; clocks; } > $R/machine.txt 2>&1
H="timeout 200 .gpu/work/ab-head .gpu/work/header.txt 9"
N="timeout 200 .gpu/work/ab-exp .gpu/work/header.txt 9"
C=("gemm 2048 2048 2048 nn" "gemm 1024 4096 14336 nt" "gemm 4096 4096 4096 nn" "gemm 4096 4096 4096 nt" "gemm 4096 4096 4096 tn"
   "gemm 4096 4096 4096 tt" "gemm 8192 4096 4096 nn" "lorab 4096 4096 4096 16" "gemm 3000 3000 3000 nn" "gemm 4096 520 1032 tn"
   "gemm 1024 1024 1024 nn" "gemm 11008 4096 2048 tn" "gemm 2048 11008 4096 nn" "gemm 4093 521 1031 tn")
for pass in 1 2; do
  export XDG_CACHE_HOME=/tmp/xdg-h; $H "${C[@]}" >> $R/defaults-head.txt 2>&1
  export XDG_CACHE_HOME=/tmp/xdg-n; $N "${C[@]}" >> $R/defaults-new.txt 2>&1
done
clocks >> $R/machine.txt
cd $OUT && tar czf r.tgz r && rm -rf r
