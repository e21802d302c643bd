/*
 * LoRA forward for few tokens: y = x * W + scale * (x * A) * B, with x Txin
 * (T <= MR <= 16), W inxout, A inxr (r <= 64), B rxout, y Txout, row-major. With VEC = 4,
 * out % 4 == 0 and the buffers start 16-byte aligned.
 *
 * Work decomposition: as gemm_rows (gemv.cl), a work-group of TN * KS work-items owns TN * VEC
 * columns of W, B and y. Each work-group computes the whole h = x * A (Txr, tiny) into local
 * memory (lowrank.cl): redundant across work-groups, but A and x are small and stay in cache,
 * while the pass over W, which dominates, is read exactly once. One token, or strips narrower
 * than r rounded up to a power of two: in a prologue before the pass; several tokens in
 * wider strips: during the pass, from the x it stages (XA_IN_PASS). The strip of x * W is
 * accumulated with split k, the low-rank term h * B added with the same split (each
 * work-item takes the rows q = ks, ks + KS, ... of B), the KS partials reduced and y written.
 * Reads: W once (4 bytes per element), B once, x and A once per work-group from cache;
 * writes y once (every element: y is never read).
 *
 * For large ranks that redundant prologue (in * r reads of A per work-group, latency-bound)
 * costs more than a second launch, so the host can split the pass in two:
 *   lora_xa: work-group g of S sums h over rows [g * chunk, (g + 1) * chunk) of A and writes
 *     the partial h to part[g] (MR rows of RMAX floats): A read once in all, x once.
 *   lora_forward_split: as lora_forward, but h is the sum of the S partials (S * T * r floats
 *     per work-group, from cache) instead of the prologue.
 *
 * With KG > 1 the rows of W (and of A) are split over KG work-groups per strip as in gemm_rows:
 * group g computes the partial h_g = x * A over its k-range only and adds h_g * B, which sums
 * over g to h * B, so the prologue shrinks by KG as well; the last group of the strip adds the
 * KG partials (strip_combine). The split path adds the whole h * B in group g = 0 only.
 *
 * Order of the loads: every work-item first issues the first round of its W loads and its rows
 * of B (strip_preload, strip_preload_lowrank), then the prologue's loads of A and x, so that the
 * three memory latencies of a one-token call overlap instead of adding up.
 *
 * Tuning parameters: TN, KS, VEC, MR, UNROLL, KG as gemv.cl.
 */
/* XA_IN_PASS (host: several tokens, a rank above 0 and rp <= TN, so that TN, a power of two,
 * is a multiple of rp): x * A rides along lora_forward's pass over W (strip_accumulate_staged,
 * from the x it stages) instead of a prologue whose loads of A and x the pass would wait for.
 * One token stages no x and keeps the prologue, as do strips narrower than rp. */
#ifndef XA_IN_PASS
#define XA_IN_PASS 0
#endif
#if XA_IN_PASS && MR < 2
#error "XA_IN_PASS needs the staged pass of several tokens"
#endif

/* The low-rank term of LoRA, scale * sum over q < r of h[i][q] * LB[q][jv], is spread over the
 * KS work-items of each column: work-item ks takes q = ks, ks + KS, ..., so that it loads at
 * most ceil(r / KS) vectors of LB and strip_store's reduction adds them up with the rest. The
 * first LB_REGS of them are loaded ahead (strip_preload_lowrank), like strip_preload, so that
 * their latency overlaps the other loads of the kernel. */
#define LB_REGS_FIT ((RMAX + KS - 1) / KS)
#define LB_REGS (LB_REGS_FIT < 8 ? LB_REGS_FIT : 8)

inline void strip_preload_lowrank(floatv *lbq, const __global floatv *lb, int nv, int jv,
                                  int ks, int r)
{
#pragma unroll
    for (int t = 0; t < LB_REGS; t++) {
        const int q = ks + t * KS;
        lbq[t] = q < r ? lb[q * nv + jv] : (floatv)(0.0f);
    }
}

/* acc[i] += scale * sum over the work-item's q of h[i][q] * LB[q][jv], the first LB_REGS rows
 * from lbq. h has rows of hstride floats in local memory and must be complete (after a
 * barrier). */
inline void strip_add_lowrank(floatv *acc, const floatv *lbq, int m, const __local float *h,
                              int hstride, const __global floatv *lb, int nv, int jv, int ks,
                              int r, float scale)
{
#pragma unroll
    for (int t = 0; t < LB_REGS; t++) {
        const int q = ks + t * KS;
        if (q < r) {
#pragma unroll
            for (int i = 0; i < MR; i++)
                acc[i] = fma((floatv)(scale * h[min(i, m - 1) * hstride + q]), lbq[t], acc[i]);
        }
    }
    for (int q = ks + LB_REGS * KS; q < r; q += KS) {
        const floatv bq = lb[q * nv + jv];
#pragma unroll
        for (int i = 0; i < MR; i++)
            acc[i] = fma((floatv)(scale * h[min(i, m - 1) * hstride + q]), bq, acc[i]);
    }
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
lora_forward(int tokens, int in, int out, int r, int rp, float scale, const __global float *x,
             const __global float *w, const __global float *a, const __global float *b,
             __global float *y, __global float *part, __global int *count)
{
    AFTER_PREVIOUS_LAUNCH();
    __local floatv red[RED_FLOATS / VEC];
    __local float h[MR * RMAX];
    __local float xs[XS_SIZE] __attribute__((aligned(16)));
    __local int last;
    const int lid = (int)get_local_id(0), nv = out / VEC, ks = lid / TN;
    int g, p0, p1;
    const int strip = strip_place(nv, in, &g, &p0, &p1);
    const int jv0 = strip * TN, jv = min(jv0 + lid % TN, nv - 1);
    const __global floatv *wv = (const __global floatv *)w, *bv = (const __global floatv *)b;
    /* W's first round and B's rows go in flight before the prologue waits on A */
    floatv wp[UNROLL], bq[LB_REGS];
    strip_preload(wp, wv, nv, p0, p1, jv, ks);
    strip_preload_lowrank(bq, bv, nv, jv, ks, r);
    __global floatv *parts = (__global floatv *)part + (size_t)strip * (KG * MR * TN);
    floatv acc[MR];
#if XA_IN_PASS
    float hs[MR];
    strip_accumulate_staged(acc, wp, xs, x, in, tokens, wv, nv, p0, p1, jv, ks,
                            (strip_lowrank){a, r, rp}, hs);
    lowrank_reduce(hs, r, rp, h, (__local float *)red, lid);
#else
    if (r > 0)
        lowrank_h(x, tokens, in, p0, p1, a, r, rp, h, (__local float *)red, lid);
    strip_accumulate_preloaded(acc, wp, xs, x, in, tokens, wv, nv, p0, p1, jv, ks);
#endif
    strip_add_lowrank(acc, bq, tokens, h, RMAX, bv, nv, jv, ks, r, scale);
    strip_store(acc, red, tokens, nv, jv0, lid, 1.0f, 0.0f, (__global floatv *)y,
                parts + g * (MR * TN));
    if (KG > 1)
        strip_combine(tokens, nv, jv0, lid, 1.0f, 0.0f, (__global floatv *)y, parts,
                      count + strip, &last);
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
lora_xa(int tokens, int in, int r, int rp, int chunk, const __global float *x,
        const __global float *a, __global float *part)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[RED_FLOATS];
    __local float h[MR * RMAX];
    const int lid = (int)get_local_id(0), g = (int)get_group_id(0);
    const int p0 = min(g * chunk, in), p1 = min(p0 + chunk, in);
    lowrank_h(x, tokens, in, p0, p1, a, r, rp, h, red, lid);
    __global float *out = part + (size_t)g * (MR * RMAX);
    for (int e = lid; e < tokens * RMAX; e += GROUP)
        if (e % RMAX < r)
            out[e] = h[e];
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
lora_forward_split(int tokens, int in, int out, int r, int parts, float scale,
                   const __global float *x, const __global float *w, const __global float *part,
                   const __global float *b, __global float *y, __global float *kpart,
                   __global int *count)
{
    AFTER_PREVIOUS_LAUNCH();
    __local floatv red[RED_FLOATS / VEC];
    __local float h[MR * RMAX];
    __local float xs[XS_SIZE] __attribute__((aligned(16)));
    __local int last;
    const int lid = (int)get_local_id(0), nv = out / VEC;
    int g, p0, p1;
    const int strip = strip_place(nv, in, &g, &p0, &p1), ks = lid / TN;
    const int jv0 = strip * TN, jv = min(jv0 + lid % TN, nv - 1);
    const __global floatv *wv = (const __global floatv *)w, *bv = (const __global floatv *)b;
    __global floatv *kp = (__global floatv *)kpart + (size_t)strip * (KG * MR * TN);
    floatv wp[UNROLL], bq[LB_REGS];
    strip_preload(wp, wv, nv, p0, p1, jv, ks);
    strip_preload_lowrank(bq, bv, nv, jv, ks, g == 0 ? r : 0);
    for (int e = lid; e < tokens * RMAX; e += GROUP) {
        if (e % RMAX < r) {
            float s = 0.0f;
            for (int q = 0; q < parts; q++)
                s += part[(size_t)q * (MR * RMAX) + e];
            h[e] = s;
        }
    }
    floatv acc[MR];
    strip_accumulate_preloaded(acc, wp, xs, x, in, tokens, wv, nv, p0, p1, jv, ks);
    barrier(CLK_LOCAL_MEM_FENCE); /* h complete */
    if (g == 0)
        strip_add_lowrank(acc, bq, tokens, h, RMAX, bv, nv, jv, ks, r, scale);
    strip_store(acc, red, tokens, nv, jv0, lid, 1.0f, 0.0f, (__global floatv *)y,
                kp + g * (MR * TN));
    if (KG > 1)
        strip_combine(tokens, nv, jv0, lid, 1.0f, 0.0f, (__global floatv *)y, kp,
                      count + strip, &last);
}
