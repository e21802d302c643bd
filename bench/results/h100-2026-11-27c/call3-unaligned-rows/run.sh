#!/bin/bash
# GPU call 3 (2026-11-27, third session): what unaligned rows cost the FMA tile kernel. NN
# products about 1000 on a side with A's rows (lda = k), B's (ldb = n), both or neither
# 16-byte aligned, and 997 x 1009 x 1013, each at its default tiles and five variants; about
# 2000 likewise; then ptxas -v (triton's, sm_90) over the programs the runs built: registers
# and spills of each variant.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-3
C=()
for s in "1000 1000 1000" "1000 1000 1001" "1000 1001 1000" "1000 1001 1001" "997 1009 1013"; do
  for v in "" "BM=128 BN=64 BK=8 RM=16 RN=4 SK=2" "BM=128 BN=64 BK=16 RM=16 RN=4 SK=2 ASYNC=3" "BM=64 BN=128 BK=16 RM=8 RN=8 SK=2" "BM=64 BN=128 BK=16 RM=8 RN=8 SK=2 ASYNC=3" "BM=128 BN=64 BK=16 RM=8 RN=8 SK=2"; do C+=("gemm $s nn $v"); done
done
for s in "2000 2000 2000" "2000 2000 2001" "2000 2001 2000"; do
  for v in "" "BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=4" "BM=128 BN=64 BK=16 RM=16 RN=4"; do C+=("gemm $s nn $v"); done
done
for pass in 1 2; do
  timeout 200 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-pass$pass.txt 2>&1
done
TB=$(python3 -c 'import triton.backends.nvidia as m, os; print(os.path.dirname(m.__file__))' 2>/dev/null)/bin
PTXAS=$TB/ptxas timeout 120 python3 $W/ptx_info.py $XDG_CACHE_HOME/hd-dispatch/programs > $R/ptxas.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
