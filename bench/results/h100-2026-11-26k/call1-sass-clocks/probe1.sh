#!/bin/bash
# GPU call 1 (2026-11-26 s4): SASS of the fp32 tile kernels at 4096^3, and SM clocks under load,
# ours against cuBLAS.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
TB=$(python3 -c 'import triton.backends.nvidia as m, os; print(os.path.dirname(m.__file__))' 2>/dev/null)/bin
{ date -u; cat .gpu/work/commit; nvidia-smi --query-gpu=name,driver_version --format=csv; ls /usr/local/cuda/bin 2>&1 | tr '\n' ' '; echo; ls $TB 2>&1 | tr '\n' ' '; echo; command -v ptxas cuobjdump nvdisasm ncu; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-p
smi() { nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader -lms 100 > $1 2>&1 & }
Q="gemm 4096 4096 4096"
.gpu/work/ab .gpu/work/header.txt 9 "$Q nn" "$Q nt" "$Q tn" > $R/ab-warm.txt 2>&1
for t in nn nt tn; do
  smi $R/clocks-ours-$t.txt; P=$!
  .gpu/work/ab .gpu/work/header.txt 64 "$Q $t" "$Q $t" "$Q $t" > $R/ab-$t.txt 2>&1
  kill $P
done
cat > /tmp/tq.py <<'PY'
import sys, time, torch
torch.backends.cuda.matmul.allow_tf32 = False
n = 4096
for t in sys.argv[1:]:
    a = torch.randn(n, n, device="cuda"); b = torch.randn(n, n, device="cuda")
    f = lambda: (a.t() if t[0] == "t" else a) @ (b.t() if t[1] == "t" else b)
    for _ in range(10): f()
    torch.cuda.synchronize(); t0 = time.time(); k = 0
    while time.time() - t0 < 4:
        for _ in range(20): f()
        torch.cuda.synchronize(); k += 20
    print(t, "%.1f us" % ((time.time() - t0) / k * 1e6), flush=True)
PY
for t in nn nt tn; do
  smi $R/clocks-torch-$t.txt; P=$!
  python3 /tmp/tq.py $t > $R/torch-$t.txt 2>&1
  kill $P
done
export PTXAS=$(command -v ptxas || ls /usr/local/cuda/bin/ptxas $TB/ptxas 2>/dev/null | head -1)
export CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump $TB/cuobjdump 2>/dev/null | head -1)
echo "ptxas $PTXAS cuobjdump $CUOBJDUMP" >> $R/machine.txt
timeout 120 python3 .gpu/work/sass.py /tmp/xdg-p/hd-dispatch/programs $R/sass > $R/sass-summary.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
