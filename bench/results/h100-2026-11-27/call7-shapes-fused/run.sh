#!/bin/bash
# GPU call 7 (2026-11-27): the shapes suite on the fused backend forced, at the last code's
# defaults (no tuning cache), device and chain modes, and the PyTorch peer on the same list.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
{ date -u; echo "commit: $(cat .gpu/work/commit)"; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-7 HD_TUNE_CACHE=/tmp/xdg-7/none.txt
B=build-gpu/bench/dispatch-bench
$B --list-cases --json $R/cases.json > /dev/null
timeout 85 $B --suites shapes --backends fused --max-time 75 --modes device,chain --budget-ms 100 \
  --json $R/ours.json > $R/ours.txt 2>&1
timeout 45 python3 bench/peers/torch_peer.py --device cuda --cases $R/cases.json --max-time 38 \
  --suite shapes --json $R/torch.json > $R/torch.txt 2>&1
$B --compare $R/torch.json --ours $R/ours.json > $R/gap-torch.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
