#!/bin/bash
# GPU call 3 (2026-11-27): the tile defaults of fma_tile_shape and halves_the_depth against
# those of ae0aeb1 (ab-head, linked to that commit's library), on the shapes of call 2 and on
# others of the same classes; the thin products' tiles (LoRA backward's rank-r products); the
# GPU tests of the async and random-shape GEMMs.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; git status --short | head; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-3
C=("gemm 4093 521 1031 tn" "gemm 4093 521 1031 nn" "gemm 4093 521 1031 nt" "gemm 8191 333 1024 tn"
   "gemm 521 4093 1031 nn" "gemm 3001 700 1500 nn" "gemm 384 4096 8192 nt" "gemm 1536 1024 1024 nn"
   "gemm 6001 443 1999 nt" "gemm 2999 1023 777 nn" "gemm 2999 1023 777 tt" "gemm 2047 1500 1000 tn"
   "gemm 1200 1200 1200 nn" "gemm 320 4096 4096 nt" "gemm 1300 1000 2048 nn" "gemm 4096 320 4096 tn"
   "lora 320 4096 4096 16" "lorab 320 4096 4096 16")
T=()
for v in "" "BM=128 BN=16 BK=32 RM=4 RN=4 SK=16" "BM=128 BN=16 BK=32 RM=4 RN=2 SK=16" \
         "BM=128 BN=16 BK=32 RM=8 RN=4 SK=8" "BM=128 BN=16 BK=32 RM=8 RN=4 SK=32" \
         "BM=256 BN=16 BK=32 RM=8 RN=4 SK=16" "BM=64 BN=16 BK=32 RM=4 RN=4 SK=16"; do
  T+=("gemm 4096 16 4096 nn $v")
done
for v in "" "BM=128 BN=16 BK=16 RM=4 RN=4 SK=16" "BM=128 BN=16 BK=16 RM=8 RN=4 ASYNC=3 SK=16" \
         "BM=128 BN=16 BK=32 RM=8 RN=4 SK=16" "BM=128 BN=16 BK=16 RM=8 RN=4 SK=32"; do
  T+=("gemm 4096 16 4096 tn $v")
done
for v in "" "BM=16 BN=128 BK=16 RM=4 RN=4 SK=16" "BM=16 BN=128 BK=16 RM=4 RN=8 ASYNC=3 SK=16" \
         "BM=16 BN=128 BK=32 RM=4 RN=8 SK=16" "BM=16 BN=128 BK=16 RM=4 RN=8 SK=32"; do
  T+=("gemm 16 4096 4096 tn $v")
done
for pass in 1 2; do
  timeout 150 $W/ab-head $W/header.txt 9 "${C[@]}" >> $R/ab-head-pass$pass.txt 2>&1
  timeout 150 $W/ab $W/header.txt 9 "${C[@]}" >> $R/ab-new-pass$pass.txt 2>&1
done
timeout 100 $W/ab $W/header.txt 9 "${T[@]}" >> $R/ab-thin.txt 2>&1
for t in test_gemm_fma_async_variants_match_reference test_gemm_random_shapes_match_reference test_gemm_tile_defaults; do
  POCL_CACHE_DIR=/tmp/pc HD_TEST_FILTER=$t timeout 150 build-gpu/tests/test_fused >> $R/test_fused.txt 2>&1; echo "$t rc $?" >> $R/test_fused.txt
done
cd $OUT && tar czf r.tgz r && rm -rf r
