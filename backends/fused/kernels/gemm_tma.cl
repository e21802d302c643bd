/*
 * Tiled GEMM on Hopper's warpgroup tensor cores, its stages copied by the Tensor Memory
 * Accelerator (TMA = 1; follows gemm_wgmma.cl, whose products it issues). Built only where
 * the device runs on the CUDA runtime with compute capability 9.0: the tensor maps that
 * describe the operands to the copy engine come from the CUDA driver (hd__rt_tensor_map), and
 * the stages take the multiprocessor's shared memory as the __local argument.
 *
 * Why: with cp.async every work-item issues copies and waits at a barrier per stage, so the
 * tensor cores idle while the copies are issued and while the slowest warp arrives. Here one
 * work-item issues each stage as two bulk copies (A's BM x 32 box and B's BN x 32 box) that
 * signal an mbarrier when their bytes have landed; the warpgroups that multiply wait on that
 * barrier alone and hand the buffer back through a second one. No work-item of the products
 * issues a copy or meets a CTA-wide barrier inside the loop.
 *
 * Operands: both stored depth-contiguous (A m x k, B n x k: TRANS_A = 0, TRANS_B = 1), rows
 * 16-byte aligned; the copy engine zero-fills what lies outside the tensor (rows past m or n,
 * depths past k), so edge tiles need no checks. In local memory each row's 32 depths take 128
 * bytes in the engine's 128-byte swizzle, which the products' descriptors name (gemm_wgmma.cl,
 * TMA): the tensor cores read the eight rows of a group from eight distinct bank groups.
 *
 * Work-items: warpgroup 0 issues the copies (one work-item; with PREC 3 its warps 1 to 3 split
 * the stages, below; the others leave), warpgroups
 * 1 .. CONSUMERS multiply, each a 64 x WN block of the BM x BN tile. Stages: ASYNC buffers; the
 * copies run up to ASYNC stages ahead of the products. Per buffer, `full` counts the copies'
 * bytes (the issuing work-item's arrival announces them) and `empty` the products' work-items,
 * which arrive once the products reading it have finished (wgmma.wait_group 1 after the next
 * stage's products were issued).
 *
 * PREC = 3 (fp32x3): each operand split as a TF32 big part and a TF32 small part (tensor_core.cl's
 * split4: the same arithmetic as gemm_mma.cl's fp32x3), three products per k8 step (small * big,
 * big * small, big * big). The split is made in local memory, where wgmma reads its operands:
 * once a stage's copies have landed, warps 1 to 3 of the copying warpgroup write each value's
 * big part over it and its small part into a second buffer of the same layout, and signal a
 * third mbarrier (`ready`), which the products wait on instead of `full`. The buffers of a
 * stage take twice the local memory.
 *
 * The second product (LoRA's), split-K slices and batches are gemm.cl's: four tensor maps,
 * A, B, A2 and B2, each of rank 3 (depth, row, matrix of the batch); slice 0 runs the second
 * pair's stages after the first's.
 *
 * MMA_EMULATE = 1: the copies become loads by every work-item into the same swizzled layout and
 * the mbarriers CTA-wide barriers, so that the layout, the descriptors' offsets, the edges and
 * the output are checked where no Hopper is (PoCL in CI); the copy engine and the barriers'
 * phases are checked on the GPU machine.
 */
#if TMA
#if !WGMMA
#error "gemm_tma.cl is the warpgroup kernel's TMA form: WGMMA = 1"
#endif
#if BK != 32 || TRANS_A || !TRANS_B
#error "the TMA kernel takes BK = 32 (one 128-byte swizzled row) and depth-contiguous operands"
#endif
#if PREC != 1 && PREC != 3 /* (tensor_core.cl's default is 3: the host names it) */
#error "PREC is 1 (tf32) or 3 (fp32x3)"
#endif
#define CONSUMERS ((BM / 64) * (BN / WN))
#define STAGE_BYTES ((BM + BN) * BK * 4)
#define SPLITTERS 96 /* PREC 3: warps 1 to 3 of the copying warpgroup */
/* The stages' floats: both operands' buffers, and with PREC 3 their small parts' */
#define STAGE_FLOATS (ASYNC * (BM + BN) * BK * (PREC == 3 ? 2 : 1))
/* The swizzle's rows repeat every 1024 bytes: the stages start on such a boundary. */
#define SWIZZLE_ALIGN 1024

#if MMA_EMULATE
/* Rows r0 .. r0 + side - 1 (below rows), depths k0 .. k0 + 31 (below kend) of x into a stage, as
 * the copy engine would write them; zeros outside. */
static inline void emulated_copy(__local float *dst, __global const float *x, int ld, int r0,
                                 int rows, int k0, int kend, int side)
{
    for (int e = get_local_id(0); e < side * BK; e += THREADS) {
        int r = e / BK, kk = e % BK;
        bool in = r0 + r < rows && k0 + kk < kend;
        dst[swizzled(r * 128 + kk * 4) / 4] = in ? x[(size_t)(r0 + r) * ld + k0 + kk] : 0.0f;
    }
}
#endif

#if PREC == 3
/* Float4s 0 .. n - 1 of a stage, every items-th from item: their big parts over them, their
 * small parts into small (tensor_core.cl's split4). */
static inline void split_stage(__local float4 *values, __local float4 *small, int n, int item,
                               int items)
{
    for (int i = item; i < n; i += items) {
        uint big[4], low[4];
        split4(values[i], big, low);
        values[i] = as_float4((uint4)(big[0], big[1], big[2], big[3]));
        small[i] = as_float4((uint4)(low[0], low[1], low[2], low[3]));
    }
}
#endif

#if !MMA_EMULATE
static inline uint shared_address(__local const void *p)
{
    return (uint)(size_t)p;
}

static inline void mbarrier_init(uint bar, uint count)
{
    asm volatile("// @sm_90a@ mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count)
                 : "memory");
}

/* Waits until the phase of parity `parity` of the barrier has completed. */
static inline void mbarrier_wait(uint bar, uint parity)
{
    uint done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\n"
                     "// @sm_90a@ mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "// @sm_90a@ selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
}

static inline void mbarrier_arrive(uint bar)
{
    asm volatile("// @sm_90a@ mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar)
                 : "memory");
}

/* The issuing work-item's arrival, announcing the bytes the stage's copies will bring. */
static inline void mbarrier_expect(uint bar, uint bytes)
{
    asm volatile("// @sm_90a@ mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                     bar),
                 "r"(bytes)
                 : "memory");
}

/* One box of the tensor map at (depth, row, matrix) into local memory at dst; its bytes
 * count on the barrier bar. */
static inline void tma_copy(uint dst, __global const ulong *map, int depth, int row, int matrix,
                            uint bar)
{
    asm volatile("// @sm_90a@ cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::"
                 "complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
                 "l"(map), "r"(depth), "r"(row), "r"(matrix), "r"(bar)
                 : "memory");
}

/* The maps were written by a copy from the host before this launch: their reads through the
 * copy engine's proxy are ordered after it. */
static inline void tensor_map_acquire(__global const ulong *map)
{
    asm volatile("// @sm_90a@ fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(map)
                 : "memory");
}
#endif

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
gemm_wgmma_tma(GEMM_PARAMS, __global const ulong *map_a, __global const ulong *map_b,
               __global const ulong *map_a2, __global const ulong *map_b2,
               __local float *restrict stage_mem)
{
    AFTER_PREVIOUS_LAUNCH_ENDS();
    tile_pos pos = tile_of(get_group_id(0), m, n, slices);
    int m0 = pos.bm * BM, n0 = pos.bn * BN;
    int kbegin = pos.slice * kchunk, kend = min(k, kbegin + kchunk);
    int stages1 = max((kend - kbegin + BK - 1) / BK, 0);
    int stages = stages1 + (pos.slice == 0 ? (k2 + BK - 1) / BK : 0);
    int lid = get_local_id(0), wg = lid / 128;

    /* the stages from the first 1024-byte boundary of the argument: A's ASYNC, B's ASYNC, with
     * PREC 3 their small parts' likewise, then the barriers (full[ASYNC], empty[ASYNC] and with
     * PREC 3 ready[ASYNC], 8 bytes each) */
    int skip = (int)((SWIZZLE_ALIGN - (size_t)stage_mem % SWIZZLE_ALIGN) % SWIZZLE_ALIGN);
    __local float *stage0 = stage_mem + skip / 4;
#define A_STAGE(s) (stage0 + (s)*BM * BK)
#define B_STAGE(s) (stage0 + ASYNC * BM * BK + (s)*BN * BK)
#define A_SMALL(s) (stage0 + ASYNC * (BM + BN) * BK + (s)*BM * BK)
#define B_SMALL(s) (stage0 + ASYNC * (BM + BN) * BK + ASYNC * BM * BK + (s)*BN * BK)

    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; i++)
        acc[i] = 0.0f;
    int consumer = wg - 1;
    int wm0 = (consumer / WGROUPS_N) * 64, wn0 = (consumer % WGROUPS_N) * WN;
    /* the warpgroup's first rows: 128 bytes each */
    int a_base = wm0 * 128, b_base = wn0 * 128;

#if MMA_EMULATE
    for (int s = 0; s < stages; s++) {
        bool first = s < stages1;
        int k0 = first ? kbegin + s * BK : (s - stages1) * BK;
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous stage's products are done */
        if (first) {
            emulated_copy(A_STAGE(0), a + pos.batch * stride_a, lda, m0, m, k0, kend, BM);
            emulated_copy(B_STAGE(0), b + pos.batch * stride_b, ldb, n0, n, k0, kend, BN);
        } else {
            emulated_copy(A_STAGE(0), a2, lda2, m0, m, k0, k2, BM);
            emulated_copy(B_STAGE(0), b2, ldb2, n0, n, k0, k2, BN);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if PREC == 3
        split_stage((__local float4 *)A_STAGE(0), (__local float4 *)A_SMALL(0), BM * BK / 4, lid,
                    THREADS);
        split_stage((__local float4 *)B_STAGE(0), (__local float4 *)B_SMALL(0), BN * BK / 4, lid,
                    THREADS);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        if (wg > 0)
            for (int kk = 0; kk < BK / 8; kk++) {
#if PREC == 3
                wgmma_step(acc, A_SMALL(0), a_base + 32 * kk, B_STAGE(0), b_base + 32 * kk, lid);
                wgmma_step(acc, A_STAGE(0), a_base + 32 * kk, B_SMALL(0), b_base + 32 * kk, lid);
#endif
                wgmma_step(acc, A_STAGE(0), a_base + 32 * kk, B_STAGE(0), b_base + 32 * kk, lid);
            }
    }
    if (wg == 0)
        return;
#else
    uint full0 = shared_address(stage0 + STAGE_FLOATS);
    uint empty0 = full0 + 8 * ASYNC, ready0 = empty0 + 8 * ASYNC;
    if (lid == 0) {
        for (int s = 0; s < ASYNC; s++) {
            mbarrier_init(full0 + 8 * s, 1);
            mbarrier_init(empty0 + 8 * s, CONSUMERS * 128);
#if PREC == 3
            mbarrier_init(ready0 + 8 * s, SPLITTERS);
#endif
        }
        asm volatile("// @sm_90a@ fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    if (wg == 0) {
#if PREC == 3
        if (lid >= 32) { /* the splitters */
            for (int s = 0; s < stages; s++) {
                int slot = s % ASYNC;
                mbarrier_wait(full0 + 8 * slot, (uint)(s / ASYNC) & 1);
                split_stage((__local float4 *)A_STAGE(slot), (__local float4 *)A_SMALL(slot),
                            BM * BK / 4, lid - 32, SPLITTERS);
                split_stage((__local float4 *)B_STAGE(slot), (__local float4 *)B_SMALL(slot),
                            BN * BK / 4, lid - 32, SPLITTERS);
                /* the writes, through the generic proxy, before the products' reads */
                asm volatile("// @sm_90a@ fence.proxy.async.shared::cta;\n" ::: "memory");
                mbarrier_arrive(ready0 + 8 * slot);
            }
            return;
        }
#endif
        if (lid != 0)
            return;
        tensor_map_acquire(map_a);
        tensor_map_acquire(map_b);
        if (k2 > 0) {
            tensor_map_acquire(map_a2);
            tensor_map_acquire(map_b2);
        }
        for (int s = 0; s < stages; s++) {
            int slot = s % ASYNC;
            uint full = full0 + 8 * slot;
            if (s >= ASYNC) /* the products of the buffer's last use have finished */
                mbarrier_wait(empty0 + 8 * slot, (uint)(s / ASYNC - 1) & 1);
            mbarrier_expect(full, STAGE_BYTES);
            uint da = shared_address(A_STAGE(slot)), db = shared_address(B_STAGE(slot));
            if (s < stages1) {
                int k0 = kbegin + s * BK;
                tma_copy(da, map_a, k0, m0, pos.batch, full);
                tma_copy(db, map_b, k0, n0, pos.batch, full);
            } else {
                int k0 = (s - stages1) * BK;
                tma_copy(da, map_a2, k0, m0, 0, full);
                tma_copy(db, map_b2, k0, n0, 0, full);
            }
        }
        return;
    }

    for (int s = 0; s < stages; s++) {
        int slot = s % ASYNC;
        mbarrier_wait((PREC == 3 ? ready0 : full0) + 8 * slot, (uint)(s / ASYNC) & 1);
        __local const float *sa = A_STAGE(slot), *sb = B_STAGE(slot);
        fence_acc(acc);
        WGMMA_BEGIN();
#pragma unroll
        for (int kk = 0; kk < BK / 8; kk++) {
#if PREC == 3
            wgmma_step(acc, A_SMALL(slot), a_base + 32 * kk, sb, b_base + 32 * kk, lid);
            wgmma_step(acc, sa, a_base + 32 * kk, B_SMALL(slot), b_base + 32 * kk, lid);
#endif
            wgmma_step(acc, sa, a_base + 32 * kk, sb, b_base + 32 * kk, lid);
        }
        asm volatile("// @sm_90a@ wgmma.commit_group.sync.aligned;\n"
                     "// @sm_90a@ wgmma.wait_group.sync.aligned 1;\n" ::
                         : "memory");
        fence_acc(acc);
        if (s > 0) /* the stage before's products have finished: its buffer goes back */
            mbarrier_arrive(empty0 + 8 * ((s - 1) % ASYNC));
    }
    WGMMA_DRAIN();
    fence_acc(acc);
#endif
#undef A_STAGE
#undef B_STAGE
#undef A_SMALL
#undef B_SMALL

    store_warpgroup(out_of(c + pos.batch * stride_c, ldc, alpha, beta, part, pos, m, n), acc,
                    m0 + wm0, n0 + wn0, m, n);
}
#endif
