/*
 * GEMM for few rows: C = alpha * A * B + beta * C, A mxk (m <= MR <= 16), B kxn, C mxn, all
 * row-major, no transposes. With VEC = 4, n % 4 == 0 and the buffers start 16-byte aligned.
 *
 * Work decomposition: a work-group of TN * KS work-items owns a strip of TN * VEC columns of B
 * and C: work-item (tn, ks) reads the vector of column tn of B rows ks, ks + KS, ks + 2KS, ...
 * (TN neighbours read consecutive vectors of one B row, so each B row segment is one coalesced
 * transaction), multiplies it by the m values A[i][p] (the same address across the group:
 * a cached broadcast) and keeps m partial sums in registers. The KS partial sums of each
 * column are then added through local memory, RCH rows at a time.
 * Reads: B once (4 bytes per element of B: the whole cost when m is small), A once per
 * work-group from cache, C once when beta != 0; writes C once. beta = 0 never reads C, so NaN
 * there is ignored as BLAS does.
 *
 * Tuning parameters (-D from the host):
 *   TN      column vectors per work-group
 *   KS      work-items splitting k within a work-group
 *   VEC     columns per work-item load (4 or 1, see common.cl)
 *   MR      rows of A held in registers (m <= MR)
 *   UNROLL  B loads issued together per work-item before their FMAs
 * The LoRA kernel (lora.cl) reuses strip_accumulate and strip_store.
 */
#ifndef TN
#define TN 8
#endif
#ifndef KS
#define KS 32
#endif
#ifndef MR
#define MR 1
#endif
#ifndef UNROLL
#define UNROLL 4
#endif

#define GROUP (TN * KS)
/* Local memory for the reduction: 16 KB, shared with the LoRA prologue. */
#define RED_FLOATS 4096
#define RCH_FIT (RED_FLOATS / (GROUP * VEC))
#define RCH_A (MR < RCH_FIT ? MR : RCH_FIT)
#define RCH (RCH_A < KS ? RCH_A : KS)
#if RCH < 1
#error "TN * KS * VEC must be at most 4096"
#endif

/* acc[i] = sum over p = ks, ks + KS, ... < k of A[i][p] * B[p][jv] (vectors), for i < MR;
 * rows at or beyond m repeat row m - 1 and are discarded by strip_store. */
inline void strip_accumulate(floatv *acc, const __global float *a, int lda, int m,
                             const __global floatv *bv, int nv, int k, int jv, int ks)
{
    int arow[MR];
#pragma unroll
    for (int i = 0; i < MR; i++) {
        acc[i] = (floatv)(0.0f);
        arow[i] = min(i, m - 1) * lda;
    }
    int p = ks;
    for (; p + (UNROLL - 1) * KS < k; p += UNROLL * KS) {
        floatv bp[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            bp[u] = bv[(p + u * KS) * nv + jv];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
#pragma unroll
            for (int i = 0; i < MR; i++)
                acc[i] = fma((floatv)(a[arow[i] + p + u * KS]), bp[u], acc[i]);
        }
    }
    for (; p < k; p += KS) {
        const floatv bp = bv[p * nv + jv];
#pragma unroll
        for (int i = 0; i < MR; i++)
            acc[i] = fma((floatv)(a[arow[i] + p]), bp, acc[i]);
    }
}

/* Adds the KS partial sums of each column and writes
 *   C[i][jv] = alpha * sum + scale * sum_q h[i][q] * LB[q][jv] + beta * C[i][jv]
 * for i < m, jv < nv (the low-rank term only when r > 0, the C term only when beta != 0).
 * h has rows of HSTRIDE floats in local memory. */
inline void strip_store(const floatv *acc, __local floatv *red, int m, int nv, int jv0, int lid,
                        float alpha, float beta, __global floatv *cv, const __local float *h,
                        int hstride, const __global floatv *lb, int r, float scale)
{
    const int tn = lid % TN, ks = lid / TN;
#pragma unroll
    for (int c0 = 0; c0 < MR; c0 += RCH) {
#pragma unroll
        for (int i = 0; i < RCH; i++)
            if (c0 + i < MR)
                red[(i * KS + ks) * TN + tn] = acc[c0 + i];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < RCH * TN) {
            const int i = lid / TN, col = lid % TN, row = c0 + i, jv = jv0 + col;
            if (row < m && jv < nv) {
                floatv s = (floatv)(0.0f);
                for (int q = 0; q < KS; q++)
                    s += red[(i * KS + q) * TN + col];
                floatv out = alpha * s;
                if (r > 0) {
                    floatv low = (floatv)(0.0f);
#pragma unroll 8
                    for (int q = 0; q < r; q++)
                        low = fma((floatv)(h[row * hstride + q]), lb[q * nv + jv], low);
                    out = fma((floatv)(scale), low, out);
                }
                if (beta != 0.0f)
                    out = fma((floatv)(beta), cv[row * nv + jv], out);
                cv[row * nv + jv] = out;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
gemm_rows(int m, int n, int k, float alpha, const __global float *a, const __global float *b,
          float beta, __global float *c)
{
    __local floatv red[RED_FLOATS / VEC];
    const int lid = (int)get_local_id(0);
    const int nv = n / VEC, jv0 = (int)get_group_id(0) * TN, jv = jv0 + lid % TN;
    floatv acc[MR];
    strip_accumulate(acc, a, k, m, (const __global floatv *)b, nv, k, min(jv, nv - 1),
                     lid / TN);
    strip_store(acc, red, m, nv, jv0, lid, alpha, beta, (__global floatv *)c, 0, 0,
                (const __global floatv *)b, 0, 0.0f);
}
