/*
 * Tiled GEMM on NVIDIA tensor cores (sm_80 and later) through inline PTX (follows gemm.cl,
 * which describes the tile, the stages, the loads and the local layout). The host builds this
 * file only for such devices, and falls back to gemm_tile.cl when the build fails.
 *
 * Arithmetic: mma.sync.m16n8k8 with TF32 operands (10-bit mantissa) and fp32 accumulation.
 *   PREC = 1 (tf32): each operand rounded to TF32 (round to nearest, ties away), one product;
 *            error near 1e-3 of |A||B|, as PyTorch's allow_tf32.
 *   PREC = 3 (fp32x3, "3xTF32"): each operand split as x = big + small, big = tf32(x),
 *            small = tf32(x - big); three products small*big + big*small + big*big (the
 *            small*small term is below fp32's rounding), the small ones first. The error is
 *            within twice fp32's, or 2^-20 of the terms' magnitudes on short sums; a
 *            non-finite x has small = NaN, so an infinity gives NaN as NaN does.
 * Work decomposition: THREADS = (BM / WM) * (BN / WN) * 32; warp w owns a WM x WN block of
 * the tile, (WM / 16) x (WN / 8) mma tiles, each with its 4 accumulators per work-item. The
 * fragments follow the PTX ISA (lane = 4 * g + t holds A rows g and g + 8 at k slots t and
 * t + 4, B k slots t and t + 4 of column g, C rows g and g + 8 at columns 2t and 2t + 1), but
 * the k slots are free to name any depths as long as A and B agree: in each 16-deep group, step
 * s (0 or 1) gives slot t depth 4t + 2s and slot t + 4 depth 4t + 2s + 1. A work-item thus
 * reads the four depths 4t .. 4t + 3 of each of its rows and columns as one float4 from the
 * depth-contiguous local layout, which serves both steps: per 16 depths a warp reads 2 float4
 * per 16 rows of A and 1 per 8 columns of B, where scalar reads would take four times as many
 * instructions.
 * Registers: per group, B's fragments of all WN / 8 column blocks, split, then for each 16-row
 * block A's, split, and its products.
 * Accumulation: the tensor cores add into their fp32 accumulators with truncation, which over
 * a deep k (three products per step) costs fp32x3 more than fp32's rounding; so fp32x3 sums
 * each 16-deep group's products of a row block in a fresh accumulator and adds that to the
 * tile's with an fp32 add, the tensor cores never carrying more than 16 depths.
 *
 * The instruction, the operands' split and their emulation (MMA_EMULATE) are tensor_core.cl's.
 *
 * Tuning parameters: WM (a multiple of 16), WN (a multiple of 8), PREC (1 or 3), ASYNC (0, or
 * 2 to 4 stages copied by cp.async, with VEC_A = VEC_B = 4 and aligned); BK a multiple of 16
 * (gemm.cl).
 */
#if WM % 16 != 0 || WN % 8 != 0 || BM % WM != 0 || BN % WN != 0 || BK % 16 != 0
#error "WM must be a multiple of 16 and WN of 8, dividing BM and BN; BK a multiple of 16"
#endif
#if PREC != 1 && PREC != 3
#error "PREC must be 1 or 3"
#endif
#define MI (WM / 16)
#define NI (WN / 8)
#define WARPS_N (BN / WN)

/* The warp's scratch for the emulated mma (tensor_core.cl), from the work-group's. */
#if MMA_EMULATE
#define SCRATCH_ARG , scratch + (lid / 32) * 32 * 6, lane
#else
#define SCRATCH_ARG
#endif

/* Depths p .. p + 3 of row i of A (column j of B) in the stage's local layout (gemm.cl). */
#if A_DEPTH_MAJOR
#define A_FRAG(as, i, p) \
    ((float4)((as)[AS_AT(i, p)], (as)[AS_AT(i, (p) + 1)], (as)[AS_AT(i, (p) + 2)], \
              (as)[AS_AT(i, (p) + 3)]))
#else
#define A_FRAG(as, i, p) (*(__local const float4 *)((as) + AS_AT(i, p)))
#endif
#if B_DEPTH_MAJOR
#define B_FRAG(bs, p, j) \
    ((float4)((bs)[BS_AT(p, j)], (bs)[BS_AT((p) + 1, j)], (bs)[BS_AT((p) + 2, j)], \
              (bs)[BS_AT((p) + 3, j)]))
#else
#define B_FRAG(bs, p, j) (*(__local const float4 *)((bs) + BS_AT(p, j)))
#endif

/* acc += the stage in as, bs for the warp's block at (wm0, wn0) of the tile. */
static inline void stage_mma(__local const float *as, __local const float *bs, int wm0, int wn0,
                             int g, int t, float4 acc[MI][NI] SCRATCH_PARAM)
{
MMA_UNROLL
    for (int q = 0; q < BK; q += 16) {
        uint bb[NI][4], bsm[NI][4];
MMA_UNROLL
        for (int j = 0; j < NI; j++)
            split4(B_FRAG(bs, q + 4 * t, wn0 + j * 8 + g), bb[j], bsm[j]);
MMA_UNROLL
        for (int i = 0; i < MI; i++) {
            uint ab[2][4], asm_[2][4];
MMA_UNROLL
            for (int h = 0; h < 2; h++)
                split4(A_FRAG(as, wm0 + i * 16 + g + 8 * h, q + 4 * t), ab[h], asm_[h]);
#if PREC == 3
            float4 part[NI];
MMA_UNROLL
            for (int j = 0; j < NI; j++)
                part[j] = (float4)(0.0f);
MMA_UNROLL
            for (int s = 0; s < 2; s++) {
MMA_UNROLL
                for (int j = 0; j < NI; j++)
                    MMA_STEP(&part[j], asm_, s, bb[j]);
MMA_UNROLL
                for (int j = 0; j < NI; j++)
                    MMA_STEP(&part[j], ab, s, bsm[j]);
MMA_UNROLL
                for (int j = 0; j < NI; j++)
                    MMA_STEP(&part[j], ab, s, bb[j]);
            }
MMA_UNROLL
            for (int j = 0; j < NI; j++)
                acc[i][j] += part[j];
#else
MMA_UNROLL
            for (int s = 0; s < 2; s++)
MMA_UNROLL
                for (int j = 0; j < NI; j++)
                    MMA_STEP(&acc[i][j], ab, s, bb[j]);
#endif
        }
    }
}

#if ASYNC
#define BUFFERS ASYNC
#else
#define BUFFERS 2
#endif

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
gemm_mma(GEMM_PARAMS STAGE_PARAM)
{
    AFTER_PREVIOUS_LAUNCH_ENDS();
    STAGE_ARRAYS(BUFFERS, AS_SIZE, BS_SIZE);
#if MMA_EMULATE
    __local float scratch[THREADS * 6];
#endif
    tile_pos pos = tile_of(get_group_id(0), m, n, slices);
    a += pos.batch * stride_a;
    b += pos.batch * stride_b;
    c += pos.batch * stride_c;
    int m0 = pos.bm * BM, n0 = pos.bn * BN;
    int kbegin = pos.slice * kchunk, kend = min(k, kbegin + kchunk);
    int lid = get_local_id(0), warp = lid / 32, lane = lid % 32;
    int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
    int g = lane / 4, t = lane % 4;

    float4 acc[MI][NI];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
            acc[i][j] = (float4)(0.0f);

    gemm_pairs q = gemm_pairs_of(pos, a, lda, b, ldb, kbegin, kend, a2, lda2, b2, ldb2, k2);
    int stages = q.stages + q.stages2;
#if ASYNC
    /* ASYNC - 1 stages in flight while one is multiplied; stage s + ASYNC - 1 goes into the
     * buffer of stage s - 1, which every warp has left at the barrier. Every work-item
     * commits a group per stage, empty past the last, so that CP_WAIT counts alike. */
    for (int s = 0; s < ASYNC - 1; s++) {
        if (s < stages)
            copy_stage(&q, s, m0, n0, m, n, as[s], bs[s]);
        cp_commit();
    }
    for (int s = 0; s < stages; s++) {
        CP_WAIT();
        barrier(CLK_LOCAL_MEM_FENCE);
        int next = s + ASYNC - 1;
        if (next < stages)
            copy_stage(&q, next, m0, n0, m, n, as[next % ASYNC], bs[next % ASYNC]);
        cp_commit();
        stage_mma(as[s % ASYNC], bs[s % ASYNC], wm0, wn0, g, t, acc SCRATCH_ARG);
    }
#else
    float ra[A_LOADS * VEC_A], rb[B_LOADS * VEC_B];
    load_stage(&q, 0, m0, n0, m, n, ra, rb);
    store_a(as[0], ra);
    store_b(bs[0], rb);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 0; s < stages; s++) {
        bool more = s + 1 < stages;
        if (more)
            load_stage(&q, s + 1, m0, n0, m, n, ra, rb);
        stage_mma(as[s & 1], bs[s & 1], wm0, wn0, g, t, acc SCRATCH_ARG);
        if (more) {
            store_a(as[(s + 1) & 1], ra);
            store_b(bs[(s + 1) & 1], rb);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif

    gemm_out o = out_of(c, ldc, alpha, beta, part, pos, m, n);
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int row = m0 + wm0 + i * 16 + g + 8 * h;
            if (row >= m)
                continue;
#pragma unroll
            for (int j = 0; j < NI; j++) {
                int col = n0 + wn0 + j * 8 + 2 * t;
                float4 v = h ? (float4)(acc[i][j].z, acc[i][j].w, 0.0f, 0.0f) : acc[i][j];
                if (col < n)
                    store_run(o, row, col, n, v, 2);
            }
        }
}
