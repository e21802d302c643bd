#!/bin/bash
# GPU call 2 (2026-11-26 s3): runtime tests (build ahead on NVIDIA's compiler), the new
# defaults for unaligned rows (ab-head: 5cca717; ab-exp: the working tree), and the tuner on
# a cold program cache with and without builds ahead.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
clocks() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv,noheader; }
{ date -u; echo "commit: $(cat .gpu/work/commit) (exp), 5cca717 (head)"; nvidia-smi --query-gpu=name,driver_version --format=csv; clocks; } > $R/machine.txt 2>&1
export POCL_CACHE_DIR=/tmp/pocl XDG_CACHE_HOME=/tmp/xdg-t
timeout 200 ./build-gpu/tests/test_opencl_runtime > $R/test_opencl_runtime.txt 2>&1; echo "rc $?" >> $R/test_opencl_runtime.txt
HD_TEST_FILTER='*defaults*' timeout 100 ./build-gpu/tests/test_fused > $R/test_fused-defaults.txt 2>&1; echo "rc $?" >> $R/test_fused-defaults.txt
H="timeout 200 .gpu/work/ab-head .gpu/work/header.txt 9"
E="timeout 200 .gpu/work/ab-exp .gpu/work/header.txt 9"
CASES=("gemm 4095 4095 4095 tn" "gemm 4095 4095 4095 tt" "gemm 4093 521 1031 tn" "gemm 4095 4095 4095 nn" "gemm 4096 4096 4096 tn")
for pass in 1 2; do
  export XDG_CACHE_HOME=/tmp/xdg-h; $H "${CASES[@]}" >> $R/ab-head.txt 2>&1
  export XDG_CACHE_HOME=/tmp/xdg-e; $E "${CASES[@]}" >> $R/ab-exp.txt 2>&1
done
clocks >> $R/machine.txt
printf 'gemm 512 512 512\ngemm 1024 1024 1024\ngemm 4093 521 1031 tn\ngemm 512 4096 4096 nt\ngemm 997 1009 1013\n' > /tmp/tune-shapes.txt
for t in 0 2; do
  export XDG_CACHE_HOME=/tmp/xdg-tune$t
  s0=$(date +%s.%N); timeout 200 ./build-gpu/autotune/tool/dispatch-autotune --shapes /tmp/tune-shapes.txt --backends fused \
    --cache /tmp/tune$t.txt --case-budget-s 3 --build-threads $t --verbose > $R/tune-threads$t.txt 2>&1
  rc=$?; echo "rc $rc wall $(python3 -c "print(round($(date +%s.%N) - $s0, 1))") s" >> $R/tune-threads$t.txt
done
clocks >> $R/machine.txt
cd $OUT && tar czf r.tgz r && rm -rf r
