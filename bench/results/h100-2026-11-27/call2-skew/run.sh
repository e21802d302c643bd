#!/bin/bash
# GPU call 2 (2026-11-27): (1) LoRA backward at 4096 tokens and each of its products alone at
# their defaults; (2) products whose n is a few hundred and odd, whose 128 x 128 tiles come to a
# little more than the units, and the half-fill NT products, against the tiles the tuner lists.
source .gpu/env.sh >/dev/null
R=$OUT/r; mkdir -p $R
W=.gpu/work
{ date -u; git log -1 --format=%h; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $R/machine.txt 2>&1
export XDG_CACHE_HOME=/tmp/xdg-2
BW=("lorab 4096 4096 4096 16" "gemm 4096 16 4096 nt" "gemm 4096 16 4096 nn" "gemm 4096 4096 4096 nt"
    "gemm 4096 16 4096 tn" "gemm 16 4096 4096 tn" "gemm 4096 4096 4112 nt")
V=("" "BM=128 BN=64 BK=16 RM=8 RN=8" "BM=64 BN=128 BK=16 RM=8 RN=8" "BM=64 BN=64 BK=16 RM=4 RN=4"
   "BM=128 BN=128 BK=8 RM=16 RN=8" "BM=128 BN=64 BK=16 RM=8 RN=4" "BM=128 BN=128 BK=16 RM=8 RN=16")
VA=("BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5" "BM=128 BN=64 BK=16 RM=8 RN=8 ASYNC=3" "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3")
SK=()
for s in "4093 521 1031 tn" "4093 521 1031 nn" "4093 521 1031 nt" "3001 700 1500 nn" "8191 333 1024 tn" "521 4093 1031 nn" "2000 900 2000 nt"; do
  for v in "${V[@]}"; do SK+=("gemm $s $v"); done
  case $s in *tn|*nn) for v in "${VA[@]}"; do SK+=("gemm $s $v"); done;; esac
done
HF=()
for s in "512 4096 4096 nt" "512 4096 4096 nn" "768 4096 4096 nt" "384 4096 8192 nt"; do
  for v in "" "BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2" "BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2" "BM=128 BN=64 BK=16 RM=8 RN=8" "BM=64 BN=128 BK=16 RM=8 RN=8 SK=2"; do HF+=("gemm $s $v"); done
done
for pass in 1 2; do
  timeout 100 $W/ab $W/header.txt 9 "${BW[@]}" >> $R/ab-backward-pass$pass.txt 2>&1
  timeout 200 $W/ab $W/header.txt 9 "${SK[@]}" >> $R/ab-skew-pass$pass.txt 2>&1
  timeout 120 $W/ab $W/header.txt 9 "${HF[@]}" >> $R/ab-halffill-pass$pass.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
