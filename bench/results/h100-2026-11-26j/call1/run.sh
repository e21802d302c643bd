#!/bin/bash
# GPU call 1 (2026-11-26 s3): the FMA kernel's 4-byte cp.async copies of unaligned rows.
# ab-head: the library at HEAD, where a variant naming ASYNC on unaligned rows runs register
# staging; ab-exp: the working tree, where it copies 4 bytes at a time. GPU tests first.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
clocks() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv,noheader; }
{ date -u; echo "commit: $(cat .gpu/work/commit) (head) and the working tree (exp)"; nvidia-smi --query-gpu=name,driver_version --format=csv; clocks; } > $R/machine.txt 2>&1
export POCL_CACHE_DIR=/tmp/pocl XDG_CACHE_HOME=/tmp/xdg-t
for f in '*async*' '*lead*'; do
  HD_TEST_FILTER="$f" timeout 300 ./build-gpu/tests/test_fused >> $R/test_fused.txt 2>&1; echo "rc $? ($f)" >> $R/test_fused.txt
done
clocks >> $R/machine.txt
H="timeout 300 .gpu/work/ab-head .gpu/work/header.txt 9"
E="timeout 300 .gpu/work/ab-exp .gpu/work/header.txt 9"
S="gemm 4093 521 1031 tn"; Q="gemm 4095 4095 4095"
CASES=("$S" "$S BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5" "$S BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=3"
  "$S BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3" "$S BM=64 BN=64 BK=8 RM=8 RN=8 ASYNC=3" "$S BM=128 BN=64 BK=16 RM=8 RN=8 ASYNC=3"
  "$S BM=64 BN=64 BK=16 RM=4 RN=4 ASYNC=4" "$S BM=64 BN=64 BK=8 RM=8 RN=8"
  "gemm 997 1009 1013 nn" "gemm 997 1009 1013 nn BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3" "gemm 997 1009 1013 nn BM=64 BN=64 BK=16 RM=4 RN=4 ASYNC=4"
  "gemm 997 1009 1013 tn" "gemm 997 1009 1013 tn BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3"
  "$Q nn" "$Q nn BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=3" "$Q tn" "$Q tn BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5"
  "$Q tt BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=3" "$Q tt"
  "gemm 61 16381 509 tt" "gemm 61 16381 509 tt BM=64 BN=64 BK=16 RM=4 RN=4 ASYNC=4"
  "gemm 4096 520 1032 tn")
for pass in 1 2; do
  export XDG_CACHE_HOME=/tmp/xdg-h; $H "${CASES[@]}" >> $R/ab-head.txt 2>&1
  export XDG_CACHE_HOME=/tmp/xdg-e; $E "${CASES[@]}" >> $R/ab-exp.txt 2>&1
  clocks >> $R/machine.txt
done
PTXAS=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas) timeout 90 python3 .gpu/work/ptx_info.py /tmp/xdg-e/hd-dispatch/programs > $R/ptxas-exp.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
