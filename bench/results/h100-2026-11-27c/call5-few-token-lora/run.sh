#!/bin/bash
# GPU call 5 (2026-11-27, third session): LoRA of few tokens on the strip kernel (lora.cl),
# variants of its strips (TN vectors by KS k-slices), loads per round (UNROLL) and k-groups
# per strip (KG) against the defaults: ab harness, chained calls, 2, 4, 8 and 16 tokens at
# 4096^2 r 16, 8 x 4096 x 14336 r 16 and 3 x 2048^2 r 8; two passes; then the same cases in
# dispatch-bench's device mode at the defaults.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; cat $W/commit; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-5
C=()
for s in "8 4096 4096 16" "4 4096 4096 16" "16 4096 4096 16" "2 4096 4096 16" "8 4096 14336 16" "3 2048 2048 8"; do
  for v in "" "KG=16" "KG=4" "UNROLL=16" "UNROLL=4" "TN=64 KS=4 UNROLL=16 KG=16" "TN=32 KS=8 UNROLL=8 KG=16" "TN=128 KS=2 UNROLL=8 KG=16" "TN=64 KS=8 UNROLL=8" "TN=64 KS=8 UNROLL=4 KG=16" "TN=32 KS=16 UNROLL=4"; do C+=("lora $s $v"); done
done
for pass in 1 2; do
  timeout 200 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-pass$pass.txt 2>&1
done
printf 'lora 8 4096 4096 16\nlora 4 4096 4096 16\nlora 16 4096 4096 16\nlora 1 4096 4096 16\ngemm 8 4096 4096\n' > /tmp/few.txt
timeout 60 $W/mjbuild/bench/dispatch-bench --shapes /tmp/few.txt --backends fused --modes device,chain --rounds 3 > $R/bench-defaults.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
