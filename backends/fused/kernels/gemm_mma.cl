/*
 * Tiled GEMM on NVIDIA tensor cores (sm_80 and later) through inline PTX (follows gemm.cl,
 * which describes the tile, the stages and the loads). The host builds this file only for
 * such devices, and falls back to gemm_tile.cl when the build fails.
 *
 * Arithmetic: mma.sync.m16n8k8 with TF32 operands (10-bit mantissa) and fp32 accumulation.
 *   PREC = 1 (tf32): each operand rounded to TF32 (round to nearest, ties away), one product;
 *            error near 1e-3 of |A||B|, as PyTorch's allow_tf32.
 *   PREC = 3 (fp32x3, "3xTF32"): each operand split as x = big + small, big = tf32(x),
 *            small = tf32(x - big); three products big*big + big*small + small*big (the
 *            small*small term is below fp32's rounding), the small ones first. The error is
 *            within twice fp32's, or 2^-20 of the terms' magnitudes on short sums; a
 *            non-finite x keeps small = 0, so NaN propagates, and an infinity meets the
 *            other operand's zero residual and gives NaN.
 * Work decomposition: THREADS = (BM / WM) * (BN / WN) * 32; warp w owns a WM x WN block of
 * the tile, (WM / 16) x (WN / 8) mma tiles, each with its 4 accumulators per work-item. Per
 * depth step of 8, a work-item reads 4 values of A per 16-row block and 2 of B per 8-column
 * block from local memory (the fragment layout of the PTX ISA: lane = 4 * g + t holds A rows
 * g and g + 8 at depths t and t + 4, B depths t and t + 4 of column g, C rows g and g + 8 at
 * columns 2t and 2t + 1), splits them, and issues PREC mma per block pair.
 * Accumulation: the tensor cores add into their fp32 accumulators with truncation, which over
 * a deep k (three products per step) costs fp32x3 more than fp32's rounding; so fp32x3 sums
 * each stage's products in a fresh accumulator and adds that to the tile's with an fp32 add,
 * the tensor cores never carrying more than one stage (BK deep).
 *
 * Tuning parameters: WM (a multiple of 16), WN (a multiple of 8), PREC (1 or 3); BK a multiple
 * of 8 (gemm.cl).
 */
#ifndef PREC
#define PREC 3 /* TF32 products per multiply: 3 (fp32x3) or 1 (tf32) */
#endif
#if WM % 16 != 0 || WN % 8 != 0 || BM % WM != 0 || BN % WN != 0 || BK % 8 != 0
#error "WM must be a multiple of 16 and WN of 8, dividing BM and BN; BK a multiple of 8"
#endif
#if PREC != 1 && PREC != 3
#error "PREC must be 1 or 3"
#endif
#define MI (WM / 16)
#define NI (WN / 8)
#define WARPS_N (BN / WN)

/* x rounded to TF32 (nearest, ties away from zero), as the exact float the tensor cores read:
 * cvt leaves the low 13 bits of its result unspecified, and the mma would drop them. */
static inline uint tf32_of(float x)
{
    uint r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r & 0xffffe000u;
}

/* x as big + small in TF32 (small = 0 for PREC = 1 and for non-finite x). */
static inline void split(float x, uint *big, uint *small)
{
    *big = tf32_of(x);
#if PREC == 3
    float rest = x - as_float(*big);
    *small = tf32_of(isfinite(rest) ? rest : 0.0f);
#else
    *small = 0;
#endif
}

/* d += a * b for one 16 x 8 x 8 block. */
static inline void mma_tf32(float4 *d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1)
{
    float d0 = d->x, d1 = d->y, d2 = d->z, d3 = d->w;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    *d = (float4)(d0, d1, d2, d3);
}

/* acc += the stage in as, bs for the warp's block at (wm0, wn0) of the tile. Per depth step,
 * A's fragments are split once and kept; B's one column block at a time, so that the
 * registers hold MI A fragments and a single B fragment beside the accumulators. */
static inline void stage_mma(__local const float *as, __local const float *bs, int wm0, int wn0,
                             int g, int t, float4 acc[MI][NI])
{
#pragma unroll
    for (int p = 0; p < BK; p += 8) {
        uint ab[MI][4], asm_[MI][4];
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                split(as[AS_AT(wm0 + i * 16 + g + 8 * (r & 1), p + t + 4 * (r >> 1))], &ab[i][r],
                      &asm_[i][r]);
#pragma unroll
        for (int j = 0; j < NI; j++) {
            uint bb[2], bsm[2];
#pragma unroll
            for (int r = 0; r < 2; r++)
                split(bs[BS_AT(p + t + 4 * r, wn0 + j * 8 + g)], &bb[r], &bsm[r]);
#pragma unroll
            for (int i = 0; i < MI; i++) {
#if PREC == 3
                mma_tf32(&acc[i][j], asm_[i][0], asm_[i][1], asm_[i][2], asm_[i][3], bb[0],
                         bb[1]);
                mma_tf32(&acc[i][j], ab[i][0], ab[i][1], ab[i][2], ab[i][3], bsm[0], bsm[1]);
#endif
                mma_tf32(&acc[i][j], ab[i][0], ab[i][1], ab[i][2], ab[i][3], bb[0], bb[1]);
            }
        }
    }
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
gemm_mma(const int m, const int n, const int k, const float alpha,
         __global const float *restrict a, const int lda, __global const float *restrict b,
         const int ldb, const float beta, __global float *restrict c, const int ldc,
         __global float *restrict part, const int kchunk, const int slices,
         const ulong stride_a, const ulong stride_b, const ulong stride_c,
         __global const float *restrict a2, const int lda2, __global const float *restrict b2,
         const int ldb2, const int k2)
{
    __local float as[2][AS_SIZE] __attribute__((aligned(16)));
    __local float bs[2][BS_SIZE] __attribute__((aligned(16)));
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

    float ra[A_LOADS * VEC_A], rb[B_LOADS * VEC_B];
    gemm_pairs q = {a, b, a2, b2, lda, ldb, lda2, ldb2, kbegin, kend, k2,
                    max((kend - kbegin + BK - 1) / BK, 0), pos.slice == 0 ? (k2 + BK - 1) / BK : 0};
    int stages = q.stages + q.stages2;
    load_stage(&q, 0, m0, n0, m, n, ra, rb);
    store_a(as[0], ra);
    store_b(bs[0], rb);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 0; s < stages; s++) {
        bool more = s + 1 < stages;
        if (more)
            load_stage(&q, s + 1, m0, n0, m, n, ra, rb);
#if PREC == 3
        float4 part[MI][NI];
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
            for (int j = 0; j < NI; j++)
                part[i][j] = (float4)(0.0f);
        stage_mma(as[s & 1], bs[s & 1], wm0, wn0, g, t, part);
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
            for (int j = 0; j < NI; j++)
                acc[i][j] += part[i][j];
#else
        stage_mma(as[s & 1], bs[s & 1], wm0, wn0, g, t, acc);
#endif
        if (more) {
            store_a(as[(s + 1) & 1], ra);
            store_b(bs[(s + 1) & 1], rb);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

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
