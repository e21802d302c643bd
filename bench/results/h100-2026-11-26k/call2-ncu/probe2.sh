#!/bin/bash
# GPU call 2 (2026-11-26 s4): Nsight Compute on the fp32 tile kernels (their cubins launched
# through the CUDA driver) and on cuBLAS's fp32 GEMM at 4096^3: stall reasons per instruction.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
ncu --version > $R/ncu.txt 2>&1
for kk in k02 k03; do
  python3 $W/launch.py $W/p1sass/$kk.cubin $W/p1sass/$kk.opts 4096 4096 4096 > $R/launch-$kk.txt 2>&1
  timeout 120 ncu --set full --import-source no --launch-skip 1 --launch-count 1 -k gemm_tile -f -o $R/prof-$kk \
    python3 $W/launch.py $W/p1sass/$kk.cubin $W/p1sass/$kk.opts 4096 4096 4096 2 >> $R/ncu.txt 2>&1
  ncu --import $R/prof-$kk.ncu-rep --page details > $R/details-$kk.txt 2>&1
  ncu --import $R/prof-$kk.ncu-rep --page source --csv --print-source sass > $R/source-$kk.csv 2>&1
done
cat > /tmp/tq.py <<'PY'
import torch
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
for _ in range(4): c = a @ b
torch.cuda.synchronize()
PY
timeout 120 ncu --set full --import-source no --launch-skip 2 --launch-count 1 -f -o $R/prof-cublas python3 /tmp/tq.py >> $R/ncu.txt 2>&1
ncu --import $R/prof-cublas.ncu-rep --page details > $R/details-cublas.txt 2>&1
ncu --import $R/prof-cublas.ncu-rep --page source --csv --print-source sass > $R/source-cublas.csv 2>&1
rm -f $R/*.ncu-rep
cd $OUT && tar czf r.tgz r && rm -rf r
