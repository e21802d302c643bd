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
 * With KG > 1, k is split over KG work-groups per strip as well (work-group id = g * strips +
 * strip, so the groups in flight at once read neighbouring columns of the same rows of B): a
 * strip alone gives too few work-groups, and too few loads in flight, to fill a GPU when n is
 * small (n = 2048: 64 groups on 132 SMs at the one-row default). Each group writes its reduced
 * partial sums (MR x TN vectors) to `part` and counts itself in count[strip]; the last of the
 * KG to arrive adds the KG partials in order of g (so the result does not depend on which
 * group came last), writes C and resets the count for the next launch. One launch still;
 * extra traffic 2 * KG * m * n floats, from cache.
 *
 * Tuning parameters (-D from the host):
 *   TN      column vectors per work-group
 *   KS      work-items splitting k within a work-group
 *   VEC     columns per work-item load (4 or 1, see common.cl)
 *   MR      rows of A held in registers (m <= MR)
 *   UNROLL  B loads issued together per work-item before their FMAs
 *   KG      work-groups splitting k for each strip (1: none)
 * The LoRA kernels (lora.cl) reuse strip_preload, strip_accumulate_preloaded and strip_store.
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
#ifndef KG
#define KG 1
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

/* With several rows, A (x of the LoRA kernels) is read from local memory: loaded from global memory
 * as MR scalars per vector of B, uniform across the TN work-items of a column group, its loads cost
 * more than the stream of B itself (the case gemm 8x4096x4096: well over one row's time with 8
 * distinct depths per warp, several times more with the whole warp on one depth; BENCHMARKS.md as
 * of commit 89a17cb). So the work-group stages XCH depths of all its rows at a time into xs[p][MR]
 * (MR floats per depth, zeros past m), and each work-item reads its MR values of a depth as float4
 * broadcasts. A chunk holds whole rounds of XU loads of B per work-item. */
#define XS_FLOATS 4096
#define XS_DEPTHS (XS_FLOATS / MR)
#define XU (UNROLL < XS_DEPTHS / KS ? UNROLL : XS_DEPTHS / KS)
#define XCH ((XS_DEPTHS / (KS * XU)) * KS * XU)
#if MR > 1 && XU < 1
#error "MR * KS must be at most 4096"
#endif
#define XS_SIZE (MR > 1 ? XS_FLOATS : 4) /* the local array of a kernel */

/* bp[u] = B[c0 + p + u * KS][jv] for the XU loads of one round of the staged pass, zero at or
 * past depth c0 + len. */
inline void staged_round(floatv *bp, const __global floatv *bv, int nv, int c0, int len, int p,
                         int jv)
{
#pragma unroll
    for (int u = 0; u < XU; u++)
        bp[u] = p + u * KS < len ? bv[(c0 + p + u * KS) * nv + jv] : (floatv)(0.0f);
}

/* acc[i] = sum over p = p0 + ks, p0 + ks + KS, ... < p1 of A[i][p] * B[p][jv], for i < MR,
 * through xs (XS_FLOATS, 16-byte aligned). first: the first round's loads (strip_preload).
 * The loads run one round ahead of the FMAs, across the chunks too: the next chunk's first
 * round is in flight while its x is staged, so no work-item waits on B and x in turn (loads
 * issued after the last round's FMAs left the memory idle between rounds). Every work-item of
 * the group calls it, with the same p0 and p1: it holds barriers.
 * A second matrix LA (in x r, row-major; lr.la NULL: none) may ride along: hacc[i] = the
 * work-item's part of the sum over the same depths of A[i][p] * LA[p][q], q = tn % lr.rp,
 * from the x already staged in xs (LoRA's x * A, lora.cl, which then adds the parts up), so
 * that no prologue makes the pass over B wait for loads of its own. The depths of each round
 * of column group ks are spread over the TN / rp work-items of each q (TN a multiple of rp, a
 * power of two); their LA loads run a round ahead, as B's do. */
typedef struct strip_lowrank {
    const __global float *la;
    int r, rp;
} strip_lowrank;

/* hv[j] = LA[c0 + p + u * KS][q] for the depths u = u0 + j * ustep < XU of the round at p of a
 * chunk of len depths from c0 (zero past len, and for q >= r). */
inline void lowrank_round(float *hv, strip_lowrank lr, int c0, int len, int p, int q, int u0,
                          int ustep)
{
#pragma unroll
    for (int j = 0; j < XU; j++) {
        const int u = u0 + j * ustep, d = p + u * KS;
        hv[j] = u < XU && d < len && q < lr.r ? lr.la[(size_t)(c0 + d) * lr.r + q] : 0.0f;
    }
}

inline void strip_accumulate_staged(floatv *acc, const floatv *first, __local float *xs,
                                    const __global float *a, int lda, int m,
                                    const __global floatv *bv, int nv, int p0, int p1, int jv,
                                    int ks, strip_lowrank lr, float *hacc)
{
    floatv bp[XU];
    float hn[XU];
    const int tn = (int)get_local_id(0) % TN;
    const int hq = tn % lr.rp, hu0 = tn / lr.rp, hstep = TN / lr.rp;
#pragma unroll
    for (int i = 0; i < MR; i++) {
        acc[i] = (floatv)(0.0f);
        hacc[i] = 0.0f;
    }
#pragma unroll
    for (int u = 0; u < XU; u++)
        bp[u] = first[u];
    if (lr.la != NULL)
        lowrank_round(hn, lr, p0, min(XCH, p1 - p0), ks, hq, hu0, hstep);
    for (int c0 = p0; c0 < p1; c0 += XCH) {
        /* the depths of the chunk's last round past len are read too (times B's zeros):
         * staged as zeros, never left holding a NaN */
        const int len = min(XCH, p1 - c0);
        const int span = min(XCH, (len + XU * KS - 1) / (XU * KS) * (XU * KS));
        barrier(CLK_LOCAL_MEM_FENCE); /* the last chunk's readers are done */
        for (int e = (int)get_local_id(0); e < MR * span; e += GROUP) {
            const int i = e / span, p = e % span;
            xs[p * MR + i] = i < m && p < len ? a[(size_t)i * lda + c0 + p] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int p = ks; p < len; p += XU * KS) {
            floatv cur[XU];
            float hv[XU];
#pragma unroll
            for (int u = 0; u < XU; u++) {
                cur[u] = bp[u];
                hv[u] = hn[u];
            }
            if (p + XU * KS < len) {
                staged_round(bp, bv, nv, c0, len, p + XU * KS, jv);
                if (lr.la != NULL)
                    lowrank_round(hn, lr, c0, len, p + XU * KS, hq, hu0, hstep);
            } else if (c0 + XCH < p1) {
                staged_round(bp, bv, nv, c0 + XCH, min(XCH, p1 - c0 - XCH), ks, jv);
                if (lr.la != NULL)
                    lowrank_round(hn, lr, c0 + XCH, min(XCH, p1 - c0 - XCH), ks, hq, hu0,
                                  hstep);
            }
#pragma unroll
            for (int u = 0; u < XU; u++) {
                const __local float *x = xs + (p + u * KS) * MR;
                float xr[MR];
#if MR % 4 == 0
#pragma unroll
                for (int i = 0; i < MR; i += 4) {
                    const float4 v = *(const __local float4 *)(x + i);
                    xr[i] = v.x;
                    xr[i + 1] = v.y;
                    xr[i + 2] = v.z;
                    xr[i + 3] = v.w;
                }
#else
#pragma unroll
                for (int i = 0; i < MR; i++)
                    xr[i] = x[i];
#endif
#pragma unroll
                for (int i = 0; i < MR; i++)
                    acc[i] = fma((floatv)(xr[i]), cur[u], acc[i]);
            }
            if (lr.la != NULL) {
#pragma unroll
                for (int j = 0; j < XU; j++) {
                    const int u = hu0 + j * hstep;
                    if (u < XU) {
                        const __local float *x = xs + (p + u * KS) * MR;
#pragma unroll
                        for (int i = 0; i < MR; i++)
                            hacc[i] = fma(x[i], hv[j], hacc[i]);
                    }
                }
            }
        }
    }
}

/* acc[i] += sum over p = p0, p0 + KS, ... < k of A[i][p] * B[p][jv] (vectors), for i < MR,
 * where arow[i] is the offset of row i of A; UNROLL loads of B issued before their FMAs. */
inline void strip_accumulate_from(floatv *acc, const int *arow, const __global float *a,
                                  const __global floatv *bv, int nv, int p0, int k, int jv)
{
    int p = p0;
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

/* Zeroes acc and sets the row offsets of A: rows at or beyond m repeat row m - 1 and are
 * discarded by strip_store. */
inline void strip_start(floatv *acc, int *arow, int lda, int m)
{
#pragma unroll
    for (int i = 0; i < MR; i++) {
        acc[i] = (floatv)(0.0f);
        arow[i] = min(i, m - 1) * lda;
    }
}

/* acc[i] = sum over p = p0 + ks, p0 + ks + KS, ... < k of A[i][p] * B[p][jv], for i < MR;
 * several rows go through xs (strip_accumulate_staged). */
inline void strip_accumulate(floatv *acc, __local float *xs, const __global float *a, int lda,
                             int m, const __global floatv *bv, int nv, int p0, int k, int jv,
                             int ks)
{
#if MR > 1
    floatv first[XU];
    float unused[MR];
    staged_round(first, bv, nv, p0, k - p0, ks, jv);
    strip_accumulate_staged(acc, first, xs, a, lda, m, bv, nv, p0, k, jv, ks,
                            (strip_lowrank){NULL, 0, 1}, unused);
#else
    int arow[MR];
    strip_start(acc, arow, lda, m);
    strip_accumulate_from(acc, arow, a, bv, nv, p0 + ks, k, jv);
#endif
}

/* The same sum in two steps, for a kernel that puts other loads in flight between them:
 * strip_preload issues the work-item's first round of loads of B (bp[u] = B[p0 + ks + u * KS][jv]
 * for u < UNROLL, zero at or past k; several rows: the staged pass's first round, XU of them);
 * strip_accumulate_preloaded uses them and goes on from there. */
inline void strip_preload(floatv *bp, const __global floatv *bv, int nv, int p0, int k, int jv,
                          int ks)
{
#if MR > 1
    staged_round(bp, bv, nv, p0, k - p0, ks, jv);
#else
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        const int p = p0 + ks + u * KS;
        bp[u] = p < k ? bv[p * nv + jv] : (floatv)(0.0f);
    }
#endif
}

inline void strip_accumulate_preloaded(floatv *acc, const floatv *bp, __local float *xs,
                                       const __global float *a, int lda, int m,
                                       const __global floatv *bv, int nv, int p0, int k, int jv,
                                       int ks)
{
#if MR > 1
    float unused[MR];
    strip_accumulate_staged(acc, bp, xs, a, lda, m, bv, nv, p0, k, jv, ks,
                            (strip_lowrank){NULL, 0, 1}, unused);
#else
    int arow[MR];
    strip_start(acc, arow, lda, m);
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        const int p = p0 + ks + u * KS;
        if (p < k) {
#pragma unroll
            for (int i = 0; i < MR; i++)
                acc[i] = fma((floatv)(a[arow[i] + p]), bp[u], acc[i]);
        }
    }
    strip_accumulate_from(acc, arow, a, bv, nv, p0 + ks + UNROLL * KS, k, jv);
#endif
}

/* Adds the KS partial sums of each column and writes C[i][jv] = alpha * sum + beta * C[i][jv]
 * for i < m, jv < nv (the C term only when beta != 0). The sums go through local memory, RCH
 * rows at a time, in a tree that adds up to 8 partials per step (log8(KS) barriers). With
 * KG > 1 the sums go to this group's block of partials instead (row i at own[i * TN]), for
 * strip_combine. */
inline void strip_store(const floatv *acc, __local floatv *red, int m, int nv, int jv0, int lid,
                        float alpha, float beta, __global floatv *cv, __global floatv *own)
{
    const int tn = lid % TN, ks = lid / TN;
#pragma unroll
    for (int c0 = 0; c0 < MR; c0 += RCH) {
#pragma unroll
        for (int i = 0; i < RCH; i++)
            if (c0 + i < MR)
                red[(i * KS + ks) * TN + tn] = acc[c0 + i];
        barrier(CLK_LOCAL_MEM_FENCE);
        /* a step writes slots below nw, each read there by its writer alone */
        for (int wdt = KS; wdt > 1;) {
            const int nw = wdt >= 8 ? wdt / 8 : 1, fan = wdt / nw;
            if (ks < nw) {
#pragma unroll
                for (int i = 0; i < RCH; i++) {
                    if (c0 + i < MR) {
                        floatv sum = red[(i * KS + ks) * TN + tn];
                        for (int f = 1; f < fan; f++)
                            sum += red[(i * KS + ks + f * nw) * TN + tn];
                        red[(i * KS + ks) * TN + tn] = sum;
                    }
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            wdt = nw;
        }
        if (lid < RCH * TN) {
            const int i = lid / TN, col = lid % TN, row = c0 + i, jv = jv0 + col;
            if (KG > 1 && row < m) {
                own[row * TN + col] = red[(i * KS) * TN + col];
            } else if (KG == 1 && row < m && jv < nv) {
                floatv out = alpha * red[(i * KS) * TN + col];
                if (beta != 0.0f)
                    out = fma((floatv)(beta), cv[row * nv + jv], out);
                cv[row * nv + jv] = out;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* The last of the KG work-groups of a strip to arrive (count: the strip's counter, parts: its
 * KG blocks of MR x TN partial vectors) adds the partials in order of g and writes
 * C[i][jv] = alpha * sum + beta * C[i][jv] as strip_store does. Every work-item first fences
 * its own partial stores, so they are visible device-wide before the group is counted; the
 * partials are read volatile, past any non-coherent cache. *last: local scratch. */
inline void strip_combine(int m, int nv, int jv0, int lid, float alpha, float beta,
                          __global floatv *cv, const __global floatv *parts,
                          volatile __global int *count, __local int *last)
{
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (lid == 0) {
        const int arrived = atomic_inc(count);
        *last = arrived == KG - 1;
        if (arrived == KG - 1)
            atomic_xchg(count, 0);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!*last)
        return;
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    const volatile __global floatv *p = (const volatile __global floatv *)parts;
    for (int e = lid; e < m * TN; e += GROUP) {
        const int row = e / TN, col = e % TN, jv = jv0 + col;
        if (jv >= nv)
            continue;
        floatv sum = p[e];
        for (int g = 1; g < KG; g++)
            sum += p[g * (MR * TN) + e];
        floatv out = alpha * sum;
        if (beta != 0.0f)
            out = fma((floatv)(beta), cv[row * nv + jv], out);
        cv[row * nv + jv] = out;
    }
}

/* Which strip and which of the KG k-ranges [*p0, *p1) of k rows this work-group serves. */
inline int strip_place(int nv, int k, int *g, int *p0, int *p1)
{
    const int strips = (nv + TN - 1) / TN, gid = (int)get_group_id(0);
    *g = gid / strips;
    const int chunk = (k + KG - 1) / KG;
    *p0 = min(*g * chunk, k);
    *p1 = min(*p0 + chunk, k);
    return gid % strips;
}

/* part: KG * MR * TN partial vectors per strip, count: one int per strip, zero between
 * launches (both unused when KG == 1). */
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
gemm_rows(int m, int n, int k, float alpha, const __global float *a, const __global float *b,
          float beta, __global float *c, __global float *part, __global int *count)
{
    AFTER_PREVIOUS_LAUNCH();
    __local floatv red[RED_FLOATS / VEC];
    __local int last;
    const int lid = (int)get_local_id(0), nv = n / VEC;
    int g, p0, p1;
    const int strip = strip_place(nv, k, &g, &p0, &p1);
    const int jv0 = strip * TN, jv = jv0 + lid % TN;
    __global floatv *parts = (__global floatv *)part + (size_t)strip * (KG * MR * TN);
    __local float xs[XS_SIZE] __attribute__((aligned(16)));
    floatv acc[MR];
    strip_accumulate(acc, xs, a, k, m, (const __global floatv *)b, nv, p0, p1, min(jv, nv - 1),
                     lid / TN);
    strip_store(acc, red, m, nv, jv0, lid, alpha, beta, (__global floatv *)c,
                parts + g * (MR * TN));
    if (KG > 1)
        strip_combine(m, nv, jv0, lid, alpha, beta, (__global floatv *)c, parts, count + strip,
                      &last);
}
