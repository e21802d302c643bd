#!/bin/bash
# GPU call 3 (2026-11-26 s4): LANES_N, warps of the FMA tiles as 2-D patches, against the
# row-by-row work-items, at 4096^3 and around; ncu on the NN tile with it.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-3
Q="gemm 4096 4096 4096"; D="BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2"; T="BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5"
CASES=("$Q nn" "$Q nn $D LANES_N=8" "$Q nn $D LANES_N=4" "$Q nn $D LANES_N=16"
  "$Q nn BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2 LANES_N=8" "$Q nn BM=128 BN=128 BK=16 RM=16 RN=8 LANES_N=8"
  "$Q nn BM=256 BN=128 BK=8 RM=16 RN=8 LANES_N=8" "$Q nn BM=256 BN=128 BK=8 RM=16 RN=8 LEAD=2 LANES_N=8"
  "$Q nn BM=128 BN=128 BK=16 RM=8 RN=16 LEAD=2 LANES_N=4" "$Q nn BM=128 BN=128 BK=16 RM=8 RN=16 LEAD=2"
  "$Q nt" "$Q nt $D LANES_N=8" "$Q nt $D LANES_N=4"
  "$Q tn" "$Q tn $T LANES_N=8" "$Q tn $T LANES_N=4" "$Q tn BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=3 LANES_N=8"
  "$Q tt" "$Q tt $D LANES_N=8"
  "gemm 3000 3000 3000 nn" "gemm 3000 3000 3000 nn BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3 LANES_N=8"
  "gemm 8192 4096 4096 nn" "gemm 8192 4096 4096 nn $D LANES_N=8"
  "gemm 2048 11008 4096 nt" "gemm 2048 11008 4096 nt $D LANES_N=8")
for pass in 1 2; do
  timeout 300 $W/ab $W/header.txt 9 "${CASES[@]}" >> $R/ab-pass$pass.txt 2>&1
done
export PTXAS=/usr/local/cuda/bin/ptxas CUOBJDUMP=/usr/local/cuda/bin/cuobjdump
timeout 120 python3 $W/sass.py /tmp/xdg-3/hd-dispatch/programs $R/sass > $R/sass-summary.txt 2>&1
K=$(grep -l -- "-DBK=16 .*-DTRANS_A=0 -DTRANS_B=0 .*-DLEAD=2 -DLANES_N=8" $R/sass/*.opts | grep -v RN=16 | head -1)
K=${K%.opts}; echo "ncu on $K: $(cat $K.opts)" >> $R/machine.txt
timeout 120 ncu --set full --import-source no --launch-skip 1 --launch-count 1 -k gemm_tile -f -o $R/prof \
  python3 $W/launch.py $K.cubin $K.opts 4096 4096 4096 2 > $R/ncu.txt 2>&1
ncu --import $R/prof.ncu-rep --page details > $R/details.txt 2>&1
ncu --import $R/prof.ncu-rep --page source --csv --print-source sass > $R/source.csv 2>&1
rm -f $R/prof.ncu-rep $R/sass/*.cubin $R/sass/*.ptx
cd $OUT && tar czf r.tgz r && rm -rf r
