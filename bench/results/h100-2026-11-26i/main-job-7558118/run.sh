#!/bin/bash
# GPU call 5 (2026-11-26 s5): the main job at the last code (autotune +
# five suites + PyTorch peer), one archive.
source .gpu/env.sh >/dev/null
mkdir -p /tmp/mj
export XDG_CACHE_HOME=/tmp/xdg HD_TUNE_CACHE=/tmp/xdg/tune.txt
mkdir -p /tmp/xdg
start=$(date +%s); nvidia-smi --query-gpu=clocks.sm,temperature.gpu,clocks_event_reasons.active --format=csv,noheader > /tmp/clocks.txt
SKIP_APT=1 SKIP_BUILD=1 BUILD=build-gpu PYTHON=python3 PEERS=torch \
  SUITES=seed,train,gemm,shapes,backward TUNE_TIME=240 BENCH_TIME=185 PEER_TIME=105 \
  BENCH_ARGS="--modes device,chain --budget-ms 100" \
  timeout -s INT 570 sh bench/main.sh /tmp/mj/main-job > /tmp/mj.log 2>&1
echo "rc $? wall $(( $(date +%s) - start )) s" >> /tmp/mj.log
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> /tmp/clocks.txt; cp /tmp/mj.log /tmp/mj/main-job/main.log; cp /tmp/clocks.txt /tmp/mj/main-job/; { date -u; echo "commit: $(cat .gpu/work/commit)"; nvidia-smi --query-gpu=name,driver_version --format=csv; } >> /tmp/mj/main-job/machine.txt
cd /tmp && tar czf $OUT/mj.tgz mj
