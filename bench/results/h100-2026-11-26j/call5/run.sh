#!/bin/bash
# GPU call 5 (2026-11-26 s3): why LoRA 64 tokens recorded clblast+fused alone in the main job
# at 1c939e7: the tuner, verbose, on a cold cache, with a squeezed case budget.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
printf 'lora 8 4096 4096 16\nlora 64 4096 4096 16\ngemm 4 5504 2048\n' > /tmp/s.txt
for t in 2 0; do for b in 1 3; do
  export XDG_CACHE_HOME=/tmp/xdg-$t-$b
  timeout 100 ./build-gpu/autotune/tool/dispatch-autotune --shapes /tmp/s.txt --cache /tmp/c-$t-$b.txt \
    --case-budget-s $b --build-threads $t --verbose > $R/tune-t$t-b$b.txt 2>&1; echo "rc $?" >> $R/tune-t$t-b$b.txt
done; done
cd $OUT && tar czf r.tgz r && rm -rf r
