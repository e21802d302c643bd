#!/bin/bash
# GPU call 6 (2026-11-27): the default of large_slices (128 x 128 tiles cut for two groups per
# unit on deep products of few tiles) against c64d56f's (ab-head, linked to that commit's
# library), on call 5's shapes and others of the class; the GPU tests of the defaults, the
# LEAD variants (split among them) and random shapes.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; git status --short | head -5; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-6
C=("gemm 512 512 8192 tn" "gemm 512 512 8192 nt" "gemm 768 768 4096 nn" "gemm 384 1024 8192 nt"
   "gemm 640 640 6144 tn" "gemm 1000 1000 3000 nn" "gemm 1024 1024 4096 nn" "gemm 512 768 8192 nn"
   "gemm 640 384 4096 nt" "gemm 1024 1024 8192 tn" "gemm 896 896 4096 tt" "gemm 256 256 16384 nn"
   "gemm 1536 512 4096 nt" "gemm 520 1000 5000 tn")
timeout 100 $W/ab-head $W/header.txt 9 "${C[@]}" >> $R/ab-head.txt 2>&1
timeout 100 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-new.txt 2>&1
for t in test_gemm_tile_defaults test_gemm_fma_lead_variants_match_reference test_gemm_random_shapes_match_reference; do
  POCL_CACHE_DIR=/tmp/pc HD_TEST_FILTER=$t timeout 100 build-gpu/tests/test_fused >> $R/test_fused.txt 2>&1; echo "$t rc $?" >> $R/test_fused.txt
done
cd $OUT && tar czf r.tgz r && rm -rf r
