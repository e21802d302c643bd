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
 * Register staging: an operand that goes through registers (any operand without ASYNC, the
 * depth-contiguous ones with it) is loaded LEAD stages ahead of its store into local memory.
 * LEAD = 1: a stage's loads are issued just before the products of the stage before and must
 * land by their end; LEAD = 2: one stage earlier, into a second set of registers, so that
 * the loads have two stages of products to land in.
 *
 * Tuning parameters: RM, RN (gemm.cl), multiples of 4; ASYNC (gemm.cl: 0, or 2 to 8 buffers,
 * the operands stored depth-major copied by cp.async, which needs VEC_A = 4 (VEC_B) for them:
 * 16 bytes a copy where ALIGN_A = 1, else 4); LEAD (1 or 2).
 */
#if RM % 4 != 0 || RN % 4 != 0 || BM % RM != 0 || BN % RN != 0
#error "RM and RN must be multiples of 4 dividing BM and BN"
#endif
#define TH_M (BM / RM)
#define BUFFERS (ASYNC ? ASYNC : 2) /* local stages of each operand */
#define TH_N (BN / RN)
#ifndef LEAD
#define LEAD 1 /* stages between an operand's register loads and their store */
#endif
#if LEAD != 1 && LEAD != 2
#error "LEAD must be 1 or 2"
#endif
#if ASYNC
#define STAGED_A (!A_ASYNC) /* A goes through registers */
#define STAGED_B (!B_ASYNC)
#else
#define STAGED_A 1
#define STAGED_B 1
#endif
#define RA_SIZE (STAGED_A ? A_LOADS * VEC_A : 1) /* registers of one stage of A */
#define RB_SIZE (STAGED_B ? B_LOADS * VEC_B : 1)

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

/* The register-staged operands' loads of stage s, and their store into a stage's buffers. */
static inline void load_staged(const gemm_pairs *q, int s, int m0, int n0, int m, int n,
                               float ra[RA_SIZE], float rb[RB_SIZE])
{
#if STAGED_A
    load_stage_a(q, s, m0, m, ra);
#endif
#if STAGED_B
    load_stage_b(q, s, n0, n, rb);
#endif
}

static inline void store_staged(__local float *as, __local float *bs, const float ra[RA_SIZE],
                                const float rb[RB_SIZE])
{
#if STAGED_A
    store_a(as, ra);
#endif
#if STAGED_B
    store_b(bs, rb);
#endif
}

#if ASYNC
#define BUFFER_OF(s) ((s) % ASYNC)
#define STORED_OF(s) ((s) + ASYNC - 1) /* the stage stored while stage s is multiplied */
#else
#define BUFFER_OF(s) ((s)&1)
#define STORED_OF(s) ((s) + 1)
#endif

/* Stage s of the k loop: its products, and the stage stored meanwhile (STORED_OF(s)): with
 * ASYNC, after the barrier that frees its buffer, its cp.async copies issued and its
 * registers (in ra_store, rb_store) stored after the products; else stored after the
 * products, then the barrier. The registers of the stage LEAD - 1 after that one are loaded
 * into ra_load, rb_load before the products (the same set for LEAD = 1). */
static inline void tile_stage(const gemm_pairs *q, int s, int stages, int m0, int n0, int m, int n,
                              __local float (*as)[AS_SIZE], __local float (*bs)[BS_SIZE], int tm,
                              int tn, float acc[RM][RN], const float ra_store[RA_SIZE],
                              const float rb_store[RB_SIZE], float ra_load[RA_SIZE],
                              float rb_load[RB_SIZE])
{
    int stored = STORED_OF(s), loaded = stored + LEAD - 1;
#if ASYNC
    CP_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE);
    if (stored < stages)
        copy_stage(q, stored, m0, n0, m, n, as[BUFFER_OF(stored)], bs[BUFFER_OF(stored)]);
    cp_commit();
#endif
    if (loaded < stages)
        load_staged(q, loaded, m0, n0, m, n, ra_load, rb_load);
    stage_fma(as[BUFFER_OF(s)], bs[BUFFER_OF(s)], tm, tn, acc);
    if (stored < stages)
        store_staged(as[BUFFER_OF(stored)], bs[BUFFER_OF(stored)], ra_store, rb_store);
#if !ASYNC
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
gemm_tile(GEMM_PARAMS STAGE_PARAM)
{
    AFTER_PREVIOUS_LAUNCH_ENDS();
    STAGE_ARRAYS(BUFFERS, AS_SIZE, BS_SIZE);
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
    /* Two sets of registers for the staged operands; with LEAD = 1 the second goes unused
     * (the compiler drops it). */
    float ra0[RA_SIZE], rb0[RB_SIZE], ra1[RA_SIZE], rb1[RB_SIZE];
#if ASYNC
    /* As gemm_mma.cl's: ASYNC - 1 stages in flight while one is multiplied, stage s + ASYNC -
     * 1 going into the buffer of stage s - 1, which every work-item has left at the barrier;
     * a group committed per stage, empty past the last. */
    for (int s = 0; s < ASYNC - 1; s++) {
        if (s < stages) {
            copy_stage(&q, s, m0, n0, m, n, as[s], bs[s]);
            load_staged(&q, s, m0, n0, m, n, ra0, rb0);
            store_staged(as[s], bs[s], ra0, rb0);
        }
        cp_commit();
    }
#define FIRST_STORED (ASYNC - 1) /* the first stage the loop stores from registers */
#else
    /* Two buffers, one barrier per stage: stage s + 1 is stored after stage s's products into
     * the buffer of stage s - 1, which every work-item left at the barrier before. */
    load_staged(&q, 0, m0, n0, m, n, ra0, rb0);
    store_staged(as[0], bs[0], ra0, rb0);
    barrier(CLK_LOCAL_MEM_FENCE);
#define FIRST_STORED 1
#endif
#if LEAD == 1
    for (int s = 0; s < stages; s++)
        tile_stage(&q, s, stages, m0, n0, m, n, as, bs, tm, tn, acc, ra0, rb0, ra0, rb0);
#else
    if (FIRST_STORED < stages)
        load_staged(&q, FIRST_STORED, m0, n0, m, n, ra0, rb0);
    /* two stages per turn, so that each set of registers is named by a constant */
    for (int s0 = 0; s0 < stages; s0 += 2) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            int s = s0 + u;
            if (s >= stages)
                break;
            tile_stage(&q, s, stages, m0, n0, m, n, as, bs, tm, tn, acc, u ? ra1 : ra0,
                       u ? rb1 : rb0, u ? ra0 : ra1, u ? rb0 : rb1);
        }
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
