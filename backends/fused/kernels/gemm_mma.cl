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
 * MMA_EMULATE = 1 replaces the PTX by OpenCL C with the same fragment layout (the operands
 * exchanged through local memory, products rounded as fp32), so that everything but the
 * instructions themselves can be tested where no tensor core is (PoCL in CI).
 *
 * Tuning parameters: WM (a multiple of 16), WN (a multiple of 8), PREC (1 or 3), ASYNC (0, or
 * 2 to 4 stages copied by cp.async, with VEC_A = VEC_B = 4 and aligned); BK a multiple of 16
 * (gemm.cl).
 */
#ifndef PREC
#define PREC 3 /* TF32 products per multiply: 3 (fp32x3) or 1 (tf32) */
#endif
#if WM % 16 != 0 || WN % 8 != 0 || BM % WM != 0 || BN % WN != 0 || BK % 16 != 0
#error "WM must be a multiple of 16 and WN of 8, dividing BM and BN; BK a multiple of 16"
#endif
#if PREC != 1 && PREC != 3
#error "PREC must be 1 or 3"
#endif
#define MI (WM / 16)
#define NI (WN / 8)
#define WARPS_N (BN / WN)

/* TF32 operands as the tensor cores read them: an mma ignores the low 13 bits of each 32-bit
 * operand, so adding half of TF32's last place to the magnitude's bits (x's bits + 0x1000)
 * rounds x to nearest, ties away from zero, in one integer add; the carry of a mantissa of
 * ones goes into the exponent as it should, and an infinity stays infinite (the carry stays
 * in the ignored bits). */
#define TF32_HALF_ULP 0x1000u
#define TF32_KEPT 0xffffe000u

/* The four values of v as TF32 big parts and, for PREC = 3, small parts: small = x - big, exact
 * in fp32, itself rounded by the same add: four operations per value, where a split through
 * cvt.rna.tf32.f32, a mask and a finiteness test takes seven; the split runs on every fragment
 * read and competes with the mma for issue slots. A non-finite x has small = NaN (inf - inf),
 * and so has a finite x that rounds to infinity (within half a TF32 place of FLT_MAX): its
 * products are NaN. */
static inline void split4(float4 v, uint big[4], uint small[4])
{
    float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int d = 0; d < 4; d++) {
#if PREC == 3
        big[d] = as_uint(x[d]) + TF32_HALF_ULP;
        small[d] = as_uint(x[d] - as_float(big[d] & TF32_KEPT)) + TF32_HALF_ULP;
#else
        /* a NaN whose payload lies in the ignored bits would read as infinity */
        big[d] = isnan(x[d]) ? 0x7fc00000u : as_uint(x[d]) + TF32_HALF_ULP;
        small[d] = 0;
#endif
    }
}

#if MMA_EMULATE
/* d += a * b for one 16 x 8 x 8 block, the fragments exchanged through the warp's 32 * 6
 * floats of local scratch; every work-item of the group calls it the same number of times. */
static inline void mma_tf32(float4 *d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1,
                            __local float *x, int lane)
{
    __local float *mine = x + lane * 6;
    mine[0] = as_float(a0 & TF32_KEPT);
    mine[1] = as_float(a1 & TF32_KEPT);
    mine[2] = as_float(a2 & TF32_KEPT);
    mine[3] = as_float(a3 & TF32_KEPT);
    mine[4] = as_float(b0 & TF32_KEPT);
    mine[5] = as_float(b1 & TF32_KEPT);
    barrier(CLK_LOCAL_MEM_FENCE);
    int g = lane / 4, t = lane % 4;
    float r[4];
    for (int o = 0; o < 4; o++) {
        int row = g + 8 * (o >> 1), col = 2 * t + (o & 1);
        float sum = 0.0f;
        for (int k = 0; k < 8; k++)
            sum += x[(4 * (row % 8) + k % 4) * 6 + row / 8 + 2 * (k / 4)] *
                   x[(4 * col + k % 4) * 6 + 4 + k / 4];
        r[o] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *d += (float4)(r[0], r[1], r[2], r[3]);
}
#define SCRATCH_PARAM , __local float *scratch, int lane
#define SCRATCH_ARG , scratch + (lid / 32) * 32 * 6, lane
#define SCRATCH_PASS , scratch, lane
/* kept rolled: PoCL compiles each barrier of an unrolled loop as a region of its own */
#define MMA_UNROLL _Pragma("unroll 1")
#else
/* d += a * b for one 16 x 8 x 8 block. */
static inline void mma_tf32(float4 *d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1)
{
    float d0 = d->x, d1 = d->y, d2 = d->z, d3 = d->w;
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    *d = (float4)(d0, d1, d2, d3);
}
#define SCRATCH_PARAM
#define SCRATCH_ARG
#define SCRATCH_PASS
#define MMA_UNROLL _Pragma("unroll")
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

/* The product of step s of a group: a[h][d] holds depth 4t + d of row g + 8h, b[d] depth
 * 4t + d of column g. */
#define MMA_STEP(d, a, s, b) \
    mma_tf32(d, (a)[0][2 * (s)], (a)[1][2 * (s)], (a)[0][2 * (s) + 1], (a)[1][2 * (s) + 1], \
             (b)[2 * (s)], (b)[2 * (s) + 1] SCRATCH_PASS)

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
gemm_mma(const int m, const int n, const int k, const float alpha,
         __global const float *restrict a, const int lda, __global const float *restrict b,
         const int ldb, const float beta, __global float *restrict c, const int ldc,
         __global float *restrict part, const int kchunk, const int slices,
         const ulong stride_a, const ulong stride_b, const ulong stride_c,
         __global const float *restrict a2, const int lda2, __global const float *restrict b2,
         const int ldb2, const int k2 STAGE_PARAM)
{
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
