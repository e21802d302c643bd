#!/bin/bash
# GPU call 4 (2026-11-26 s4): UNROLL (the depth loop of a stage unrolled part way) and 8-deep
# stages in the FMA tiles at 4096^3; ncu on the best NN one.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-4
Q="gemm 4096 4096 4096"; D="BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2"; E="BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2"; T="BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5"
CASES=("$Q nn" "$Q nn $D UNROLL=8" "$Q nn $D UNROLL=4" "$Q nn $D UNROLL=2" "$Q nn $E" "$Q nn $E UNROLL=4" "$Q nn $E UNROLL=2"
  "$Q nn BM=128 BN=128 BK=16 RM=16 RN=8 UNROLL=4" "$Q nn BM=128 BN=128 BK=16 RM=16 RN=8 ASYNC=3 UNROLL=4"
  "$Q nt" "$Q nt $D UNROLL=8" "$Q nt $D UNROLL=4" "$Q nt $E UNROLL=4"
  "$Q tn" "$Q tn $T UNROLL=4" "$Q tn $T UNROLL=2" "$Q tn BM=128 BN=128 BK=16 RM=16 RN=8 ASYNC=3 UNROLL=4"
  "$Q tt" "$Q tt $D UNROLL=4" "$Q tt $E UNROLL=4")
for pass in 1 2; do
  timeout 300 $W/ab $W/header.txt 9 "${CASES[@]}" >> $R/ab-pass$pass.txt 2>&1
done
export PTXAS=/usr/local/cuda/bin/ptxas CUOBJDUMP=/usr/local/cuda/bin/cuobjdump
timeout 120 python3 $W/sass.py /tmp/xdg-4/hd-dispatch/programs $R/sass > $R/sass-summary.txt 2>&1
for pat in "-DBK=16 .*-DTRANS_A=0 -DTRANS_B=0 .*-DLEAD=2 -DUNROLL_P=4" "-DBK=8 .*-DTRANS_A=1 -DTRANS_B=0 .*-DASYNC=5 -DUNROLL_P=4"; do
  K=$(grep -l -- "$pat" $R/sass/*.opts | head -1); K=${K%.opts}; n=$(basename $K)
  echo "ncu on $K: $(cat $K.opts)" >> $R/machine.txt
  timeout 120 ncu --set full --import-source no --launch-skip 1 --launch-count 1 -k gemm_tile -f -o $R/prof \
    python3 $W/launch.py $K.cubin $K.opts 4096 4096 4096 2 > $R/ncu-$n.txt 2>&1
  ncu --import $R/prof.ncu-rep --page details > $R/details-$n.txt 2>&1
  ncu --import $R/prof.ncu-rep --page source --csv --print-source sass > $R/source-$n.csv 2>&1
  rm -f $R/prof.ncu-rep
done
rm -f $R/sass/*.cubin $R/sass/*.ptx
cd $OUT && tar czf r.tgz r && rm -rf r
