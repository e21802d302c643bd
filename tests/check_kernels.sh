#!/usr/bin/env bash
# Compiles every program of the fused backend (its kernel files joined as
# backends/fused/program.c joins them) with clang as OpenCL C 3.0 for NVIDIA's PTX target, the
# generic address space on, under the build options the backend passes (a sample of each
# family, every GEMM arithmetic and transpose). PoCL, where the other tests run, is more
# lenient than NVIDIA's compiler: a private array passed where a parameter is generic builds
# there and fails on the GPU; and the PTX of the tensor-core and cp.async paths, which PoCL
# never builds (it runs their emulation), is checked here for its operand constraints.
# Usage: check_kernels.sh KERNELS_DIR
set -u
dir=${1:?usage: check_kernels.sh KERNELS_DIR}
clang=${CLANG:-clang}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Skipped (77) where clang cannot compile OpenCL C 3.0 for NVIDIA's target (not installed, or
# built without it); tests/run.sh installs Debian's, which can.
echo 'kernel void probe(global float *x) { x[0] = 1.0f; }' > "$work/probe.cl"
if ! "$clang" -target nvptx64-nvidia-nvcl -Xclang -cl-ext=+__opencl_c_generic_address_space \
    -x cl -cl-std=CL3.0 -Xclang -finclude-default-header -fsyntax-only "$work/probe.cl" \
    >/dev/null 2>&1; then
    echo "check_kernels: $clang cannot compile OpenCL C 3.0 for nvptx64: skipped"
    exit 77
fi
failed=0 checked=0

join() { # NAME FILE... : the program source NAME from the kernel files given
    local name=$1
    shift
    local f
    for f in launch "$@"; do cat "$dir/$f.cl" && echo; done > "$work/$name.cl"
}
join softmax common softmax
join layer_norm common layer_norm
join rms_norm common rms_norm
join gemv common gemv
join gemv_nt common gemv_nt
join lora common gemv lowrank lora
join lora_update common lowrank lora_update
join lora_backward common lowrank lora_backward
join rows_backward common rows_backward
join gemm_tile tensor_core gemm gemm_tile
join gemm_mma tensor_core gemm gemm_mma
join gemm_wgmma tensor_core gemm gemm_wgmma gemm_tma
join elementwise elem elementwise
join rope elem rope
join embedding elem embedding
join attention elem tensor_core attention attention_mma
join add_rms_norm common elem add_rms_norm
join cross_entropy common elem cross_entropy
join adamw common adamw

check() { # PROGRAM OPTIONS...
    local program=$1
    shift
    checked=$((checked + 1))
    if ! out=$("$clang" -target nvptx64-nvidia-nvcl -Xclang -cl-ext=+__opencl_c_generic_address_space \
        -x cl -cl-std=CL3.0 -Xclang -finclude-default-header -fsyntax-only -Dasm=__asm__ \
        "$@" "$work/$program.cl" 2>&1); then
        echo "FAIL $program $*"
        echo "$out" | grep -m 5 'error'
        failed=$((failed + 1))
    fi
}

for p in softmax layer_norm rms_norm; do
    check $p -DWG=256 -DROWS=1 -DVEC=1 -DCACHE=4
    check $p -DWG=64 -DROWS=4 -DVEC=4 -DCACHE=0
done
for prefetch in 0 1; do
    check rows_backward -DWG=256 -DROWS=1 -DVEC=4 -DCACHE=4 -DPREFETCH=$prefetch
done
check rows_backward -DWG=128 -DROWS=2 -DVEC=1 -DCACHE=0
for p in gemv lora; do
    check $p -DTN=64 -DKS=4 -DVEC=4 -DUNROLL=4 -DMR=1 -DKG=1
    check $p -DTN=32 -DKS=8 -DVEC=1 -DUNROLL=1 -DMR=8 -DKG=4
done
check lora -DTN=64 -DKS=4 -DVEC=4 -DUNROLL=2 -DMR=8 -DKG=1 -DXA_IN_PASS=1
check gemv_nt -DWARPS=8 -DKW=4 -DMR=4 -DVEC=4 -DRPW=2
check gemv_nt -DWARPS=4 -DKW=2 -DMR=1 -DVEC=1 -DRPW=1
check lora_update -DWG=256 -DVEC=4 -DMR=4
check lora_update -DWG=64 -DVEC=1 -DMR=1
for t in 0 1; do
    check lora_backward -DGROUP=256 -DWARPS=8 -DMR=4 -DVEC=4 -DDB_VEC=4 -DTRANS_W=$t -DTRANS_A=$t -DTRANS_B=$t
done
check lora_backward -DGROUP=256 -DWARPS=8 -DMR=1 -DVEC=1 -DDB_VEC=1 -DTRANS_W=0 -DTRANS_A=1 -DTRANS_B=0

# The training step's programs at their defaults and at other sizes, with float and with bf16
# activations (ACT_BF16, elem.cl).
for bf16 in 0 1; do
    for p in elementwise rope embedding attention add_rms_norm cross_entropy; do
        check $p -DACT_BF16=$bf16
    done
    check elementwise -DVEC=1 -DACT_BF16=$bf16
    check embedding -DVEC=8 -DACT_BF16=$bf16
    check rope -DFREQ_PAIRS=0 -DHEADS_PER_ITEM=1 -DACT_BF16=$bf16
    check add_rms_norm -DWG=64 -DROWS=4 -DVEC=1 -DCACHE=0 -DPREFETCH=1 -DACT_BF16=$bf16
    check cross_entropy -DWG=128 -DROWS=2 -DVEC=1 -DACT_BF16=$bf16
    check cross_entropy -DWG=512 -DCLUSTER=8 -DCACHE=8 -DACT_BF16=$bf16
    check cross_entropy -DWG=256 -DCLUSTER=1 -DCACHE=3 -DVEC=1 -DACT_BF16=$bf16
    check cross_entropy -DWG=128 -DCLUSTER=4 -DCACHE=2 -DCLUSTER_EMULATE=1 -DACT_BF16=$bf16
    for d in 64 256; do
        check attention -DHEAD_DIM=$d -DACT_BF16=$bf16
    done
done
# Attention on tensor cores (attention_mma.cl): both arithmetics, the local memory as the
# kernels' own arrays and as their argument, tiles other than the defaults, a head that is no
# multiple of 16, bf16 activations, the emulation, the backward's streamed tiles in one buffer,
# dq added by dk and dv's kernel (ds in the tile's buffer, and in its own area at heads of 8).
for prec in 1 3; do
    for local_arg in 0 1; do
        for atomic in 0 1; do
            check attention -DHEAD_DIM=128 -DATT_MMA=1 -DPREC=$prec -DMMA_LOCAL_ARG=$local_arg \
                -DDQ_ATOMIC=$atomic
        done
    done
done
check attention -DHEAD_DIM=8 -DATT_MMA=1 -DPREC=3 -DDQ_ATOMIC=1 -DMMA_KBK=32 -DMMA_KBQ=32
check attention -DHEAD_DIM=72 -DATT_MMA=1 -DPREC=3 -DMMA_EMULATE=1 -DDQ_ATOMIC=1 -DMMA_RING=1
check attention -DHEAD_DIM=72 -DATT_MMA=1 -DPREC=3 -DMMA_BQ=32 -DMMA_BK=16 -DMMA_KBK=32 -DMMA_KBQ=16 -DMMA_RING=1
check attention -DHEAD_DIM=128 -DATT_MMA=1 -DPREC=1 -DMMA_LOCAL_ARG=1 -DACT_BF16=1
check attention -DHEAD_DIM=64 -DATT_MMA=1 -DPREC=3 -DMMA_EMULATE=1
check attention -DHEAD_DIM=64 -DATT_MMA=1 -DPREC=3 -DMMA_EMULATE=1 -DMMA_RING=1
check adamw
check adamw -DWG=64 -DELEMS=1
check adamw -DSLOTS=16
check adamw -DSLOTS=32 -DELEMS=8
check adamw -DSLOTS=32 -DEVICT_FIRST=1 -DHD_DEPENDENT_LAUNCH=1

# The tiled GEMM: tile.c's options, the FMA kernel in every transpose.
for ta in 0 1; do
    for tb in 0 1; do
        base="-DVEC_C=4 -DTRANS_A=$ta -DTRANS_B=$tb"
        aligned="-DVEC_A=4 -DVEC_B=4 -DALIGN_A=1 -DALIGN_B=1"
        for async in 0 3; do
            for lead in "" -DLEAD=2; do
                check gemm_tile -DBM=128 -DBN=128 -DBK=8 $aligned $base -DSPLIT_K=0 -DRM=16 -DRN=8 -DASYNC=$async $lead
            done
        done
        check gemm_tile -DBM=64 -DBN=128 -DBK=16 $aligned $base -DSPLIT_K=1 -DRM=8 -DRN=8 -DASYNC=3 -DMMA_EMULATE=1
        check gemm_tile -DBM=64 -DBN=64 -DBK=16 -DVEC_A=4 -DVEC_B=1 -DALIGN_A=0 -DALIGN_B=0 $base -DSPLIT_K=0 -DRM=4 -DRN=4 -DASYNC=0
        # the tensor-core kernels in NN and TT, which between them store each operand both ways
        [ "$ta" = "$tb" ] || continue
        for prec in 1 3; do
            check gemm_mma -DBM=128 -DBN=128 -DBK=16 $aligned $base -DSPLIT_K=0 -DMMA=1 -DWM=64 -DWN=32 -DPREC=$prec -DASYNC=0
            check gemm_mma -DBM=64 -DBN=128 -DBK=16 $aligned $base -DSPLIT_K=1 -DMMA=1 -DWM=32 -DWN=64 -DPREC=$prec -DASYNC=4
        done
        check gemm_mma -DBM=128 -DBN=128 -DBK=16 $aligned $base -DSPLIT_K=0 -DMMA=1 -DWM=64 -DWN=32 -DPREC=3 -DASYNC=3 -DMMA_EMULATE=1
        for emulate in 0 1; do
            check gemm_wgmma -DBM=128 -DBN=256 -DBK=16 $aligned $base -DSPLIT_K=0 -DWGMMA=1 -DWN=256 -DASYNC=3 -DOVERLAP=0 -DAREG=1 -DMMA_EMULATE=$emulate
            check gemm_wgmma -DBM=128 -DBN=128 -DBK=8 $aligned $base -DSPLIT_K=0 -DWGMMA=1 -DWN=128 -DASYNC=6 -DOVERLAP=1 -DAREG=0 -DMMA_EMULATE=$emulate
        done
        check gemm_wgmma -DBM=64 -DBN=64 -DBK=16 -DVEC_A=1 -DVEC_B=1 -DALIGN_A=0 -DALIGN_B=0 $base -DSPLIT_K=1 -DWGMMA=1 -DWN=64 -DASYNC=4 -DOVERLAP=1 -DAREG=0
    done
done
# The warpgroup kernel with the copy engine's stages (gemm_tma.cl): depth-contiguous operands
# alone, the real kernel and its emulation, split-K.
tma="-DVEC_A=1 -DVEC_B=1 -DALIGN_A=1 -DALIGN_B=1 -DVEC_C=4 -DTRANS_A=0 -DTRANS_B=1 -DWGMMA=1 -DTMA=1"
for emulate in 0 1; do
    check gemm_wgmma -DBM=128 -DBN=256 -DBK=32 $tma -DSPLIT_K=0 -DWN=256 -DASYNC=4 -DPREC=1 -DMMA_EMULATE=$emulate
    check gemm_wgmma -DBM=128 -DBN=128 -DBK=32 $tma -DSPLIT_K=0 -DWN=128 -DASYNC=3 -DPREC=3 -DMMA_EMULATE=$emulate
done
check gemm_wgmma -DBM=64 -DBN=64 -DBK=32 $tma -DSPLIT_K=1 -DWN=64 -DASYNC=8 -DPREC=1
check gemm_wgmma -DBM=64 -DBN=64 -DBK=32 $tma -DSPLIT_K=1 -DWN=64 -DASYNC=6 -DPREC=3

# Every program as the CUDA runtime builds it on Hopper, each launch ordered after the one
# before it by griddepcontrol (launch.cl).
for p in softmax rows_backward lora gemv_nt elementwise rope embedding add_rms_norm adamw; do
    check $p -DHD_DEPENDENT_LAUNCH=1
done
check cross_entropy -DWG=512 -DCLUSTER=8 -DCACHE=8 -DHD_DEPENDENT_LAUNCH=1
check attention -DHEAD_DIM=128 -DATT_MMA=1 -DPREC=3 -DMMA_LOCAL_ARG=1 -DHD_DEPENDENT_LAUNCH=1
check gemm_wgmma -DBM=128 -DBN=256 -DBK=32 $tma -DSPLIT_K=0 -DWN=256 -DASYNC=4 -DPREC=1 -DHD_DEPENDENT_LAUNCH=1

# Every kernel's first statement is AFTER_PREVIOUS_LAUNCH() or AFTER_PREVIOUS_LAUNCH_ENDS()
# (launch.cl): the runtime launches a kernel that holds griddepcontrol.wait as a dependent
# launch, which is in order only where nothing before the wait touches global memory. A kernel
# opened by READS_AHEAD_OF_PREVIOUS_LAUNCH() reads ahead of its wait, and must hold the wait.
for f in "$dir"/*.cl; do
    kernels=$(grep -c '^__kernel' "$f")
    bad=$(awk '
        function done() { if (k && (!opened || (ahead && !waits))) n++ }
        /^__kernel/ { done(); k = 1; opened = 0; ahead = 0; waits = 0; next }
        k && !opened && /^\{$/ {
            opened = 1; getline
            if ($0 == "    READS_AHEAD_OF_PREVIOUS_LAUNCH();") ahead = 1
            else if ($0 != "    AFTER_PREVIOUS_LAUNCH();" && $0 != "    AFTER_PREVIOUS_LAUNCH_ENDS();") n++
            next
        }
        k && ahead && /^    AFTER_PREVIOUS_LAUNCH\(\);$/ { waits = 1 }
        END { done(); print n + 0 }' "$f")
    checked=$((checked + 1))
    if [ "$bad" != 0 ]; then
        echo "FAIL $(basename "$f"): $bad of its $kernels kernels begin with no launch macro, or read ahead without AFTER_PREVIOUS_LAUNCH()"
        failed=$((failed + 1))
    fi
done

echo "check_kernels: $checked builds and files, $failed failed"
[ "$failed" -eq 0 ]
