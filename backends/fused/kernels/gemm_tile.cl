/*
 * Tiled GEMM with fp32 FMAs (follows gemm.cl, which describes the tile, the stages and the
 * loads).
 *
 * Work decomposition: THREADS = (BM / RM) * (BN / RN) work-items per tile; work-item
 * (tm, tn) owns RM x RN results in registers: RM / 4 runs of 4 rows spaced 4 * (BM / RM)
 * apart, and likewise RN / 4 runs of 4 columns, so that at each depth a warp reads two
 * float4 of A (a broadcast each) and consecutive float4 of B from local memory.
 * Arithmetic per stage and work-item: BK * RM * RN FMAs against BK * (RM + RN) / 4 local
 * vector reads.
 *
 * Tuning parameters: RM, RN (gemm.cl), multiples of 4; ASYNC (gemm.cl: 0, or 2 to 4 buffers,
 * the operands stored depth-major copied by cp.async, which needs VEC_A = 4 and ALIGN_A = 1
 * (VEC_B, ALIGN_B) for them).
 */
#if RM % 4 != 0 || RN % 4 != 0 || BM % RM != 0 || BN % RN != 0
#error "RM and RN must be multiples of 4 dividing BM and BN"
#endif
#define TH_M (BM / RM)
#define BUFFERS (ASYNC ? ASYNC : 2) /* local stages of each operand */
#define TH_N (BN / RN)

/* acc += the stage in as, bs for work-item (tm, tn). */
static inline void stage_fma(__local const float *as, __local const float *bs, int tm, int tn,
                             float acc[RM][RN])
{
#pragma unroll
    for (int p = 0; p < BK; p++) {
        float av[RM], bv[RN];
#pragma unroll
        for (int r = 0; r < RM / 4; r++) {
            float4 v = *(__local const float4 *)(as + AS_AT(r * 4 * TH_M + tm * 4, p));
            av[r * 4 + 0] = v.x;
            av[r * 4 + 1] = v.y;
            av[r * 4 + 2] = v.z;
            av[r * 4 + 3] = v.w;
        }
#pragma unroll
        for (int r = 0; r < RN / 4; r++) {
            float4 v = *(__local const float4 *)(bs + BS_AT(p, r * 4 * TH_N + tn * 4));
            bv[r * 4 + 0] = v.x;
            bv[r * 4 + 1] = v.y;
            bv[r * 4 + 2] = v.z;
            bv[r * 4 + 3] = v.w;
        }
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < RN; j++)
                acc[i][j] = fma(av[i], bv[j], acc[i][j]);
    }
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
gemm_tile(const int m, const int n, const int k, const float alpha,
          __global const float *restrict a, const int lda, __global const float *restrict b,
          const int ldb, const float beta, __global float *restrict c, const int ldc,
          __global float *restrict part, const int kchunk, const int slices,
         const ulong stride_a, const ulong stride_b, const ulong stride_c,
         __global const float *restrict a2, const int lda2, __global const float *restrict b2,
         const int ldb2, const int k2)
{
    __local float as[BUFFERS][AS_SIZE] __attribute__((aligned(16)));
    __local float bs[BUFFERS][BS_SIZE] __attribute__((aligned(16)));
    tile_pos pos = tile_of(get_group_id(0), m, n, slices);
    a += pos.batch * stride_a;
    b += pos.batch * stride_b;
    c += pos.batch * stride_c;
    int m0 = pos.bm * BM, n0 = pos.bn * BN;
    int kbegin = pos.slice * kchunk, kend = min(k, kbegin + kchunk);
    int lid = get_local_id(0), tm = lid / TH_N, tn = lid % TH_N;

    float acc[RM][RN];
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
        for (int j = 0; j < RN; j++)
            acc[i][j] = 0.0f;

    gemm_pairs q = gemm_pairs_of(pos, a, lda, b, ldb, kbegin, kend, a2, lda2, b2, ldb2, k2);
    int stages = q.stages + q.stages2;
#if ASYNC
    /* As gemm_mma.cl's: ASYNC - 1 stages in flight while one is multiplied, stage s + ASYNC -
     * 1 going into the buffer of stage s - 1, which every work-item has left at the barrier;
     * a group committed per stage, empty past the last. An operand staged through registers
     * is loaded with its stage's copies and stored after the products, before the next
     * barrier, which orders it before its own products ASYNC - 1 stages later. */
#if !A_ASYNC
    float ra[A_LOADS * VEC_A];
#endif
#if !B_ASYNC
    float rb[B_LOADS * VEC_B];
#endif
    for (int s = 0; s < ASYNC - 1; s++) {
        if (s < stages) {
            copy_stage(&q, s, m0, n0, m, n, as[s], bs[s]);
#if !A_ASYNC
            load_stage_a(&q, s, m0, m, ra);
            store_a(as[s], ra);
#endif
#if !B_ASYNC
            load_stage_b(&q, s, n0, n, rb);
            store_b(bs[s], rb);
#endif
        }
        cp_commit();
    }
    for (int s = 0; s < stages; s++) {
        CP_WAIT();
        barrier(CLK_LOCAL_MEM_FENCE);
        int next = s + ASYNC - 1;
        bool more = next < stages;
        if (more) {
            copy_stage(&q, next, m0, n0, m, n, as[next % ASYNC], bs[next % ASYNC]);
#if !A_ASYNC
            load_stage_a(&q, next, m0, m, ra);
#endif
#if !B_ASYNC
            load_stage_b(&q, next, n0, n, rb);
#endif
        }
        cp_commit();
        stage_fma(as[s % ASYNC], bs[s % ASYNC], tm, tn, acc);
        if (more) {
#if !A_ASYNC
            store_a(as[next % ASYNC], ra);
#endif
#if !B_ASYNC
            store_b(bs[next % ASYNC], rb);
#endif
        }
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
        stage_fma(as[s & 1], bs[s & 1], tm, tn, acc);
        if (more) {
            store_a(as[(s + 1) & 1], ra);
            store_b(bs[(s + 1) & 1], rb);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif

    gemm_out o = out_of(c, ldc, alpha, beta, part, pos, m, n);
#pragma unroll
    for (int i = 0; i < RM; i++) {
        int row = m0 + (i / 4) * 4 * TH_M + tm * 4 + i % 4;
        if (row >= m)
            continue;
#pragma unroll
        for (int r = 0; r < RN / 4; r++) {
            int col = n0 + r * 4 * TH_N + tn * 4;
            if (col < n)
                store_run(o, row, col, n,
                          (float4)(acc[i][r * 4], acc[i][r * 4 + 1], acc[i][r * 4 + 2],
                                   acc[i][r * 4 + 3]),
                          4);
        }
    }
}
