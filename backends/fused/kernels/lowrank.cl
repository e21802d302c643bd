/*
 * The low-rank prologue shared by the LoRA kernels: h = X * A for the m (<= MR) rows of X a
 * work-group serves, X mxin (row stride in), A inxr (r <= RMAX = 64), both row-major; h goes
 * to local memory as MR rows of RMAX floats. lowrank_h sums over p in [p0, p1) only, so the
 * sum can be split across work-groups (lora.cl, lora_xa).
 *
 * Work decomposition: the GROUP work-items form rp (r rounded up to a power of two) columns
 * by GROUP / rp k-slices: work-item (q, s) sums X[i][p] * A[p][q] over p = s, s + GROUP / rp,
 * ... for every row i (A reads are coalesced across q, X reads are broadcasts), then the
 * k-slices are added in a tree through local memory, HCH rows at a time, up to 8 per step.
 * Reads: A once and X once per work-group (both small, from cache); writes only local memory.
 * GROUP must be a power of two of at least 64. lowrank_reduce is the tree alone, for partial
 * sums made elsewhere (lora.cl sums them during its pass over W).
 */
#ifndef GROUP
#define GROUP WG
#endif
#ifndef MR
#define MR 1
#endif
#define RMAX 64
#define HCH_FIT (4096 / GROUP)
#define HCH (MR < HCH_FIT ? MR : HCH_FIT)

/* Adds up the partial sums of h that the work-items hold (acc[i] for row i, column
 * q = lid % rp, one of GROUP / rp slices s = lid / rp of the depths) into h: a tree through
 * local memory (red, 4096 floats), HCH rows at a time, up to 8 slices per step (log8 of the
 * slices barriers). Every work-item of the group calls it: it holds barriers. */
inline void lowrank_reduce(const float *acc, int r, int rp, __local float *h, __local float *red,
                           int lid)
{
    const int q = lid % rp, s = lid / rp, ns = GROUP / rp;
#pragma unroll
    for (int c0 = 0; c0 < MR; c0 += HCH) {
#pragma unroll
        for (int i = 0; i < HCH; i++)
            if (c0 + i < MR)
                red[i * GROUP + lid] = acc[c0 + i];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int wdt = ns; wdt > 1;) {
            const int nw = wdt >= 8 ? wdt / 8 : 1, fan = wdt / nw;
            if (s < nw) {
#pragma unroll
                for (int i = 0; i < HCH; i++) {
                    float sum = red[i * GROUP + lid];
                    for (int f = 1; f < fan; f++)
                        sum += red[i * GROUP + lid + f * nw * rp];
                    red[i * GROUP + lid] = sum;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            wdt = nw;
        }
        if (lid < rp && q < r) {
#pragma unroll
            for (int i = 0; i < HCH; i++)
                if (c0 + i < MR)
                    h[(c0 + i) * RMAX + q] = red[i * GROUP + q];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* As lowrank_h, with element (p, q) of the in x r operand at a[p * sp + q * sq]: LoRA's
 * backward sums dy * B^T with B stored r x out (sp = 1, sq = out). */
inline void lowrank_h_strided(const __global float *x, int m, int in, int p0, int p1,
                              const __global float *a, int sp, int sq, int r, int rp,
                              __local float *h, __local float *red, int lid)
{
    const int q = lid % rp, s = lid / rp, ns = GROUP / rp;
    float acc[MR];
    int xrow[MR];
#pragma unroll
    for (int i = 0; i < MR; i++) {
        acc[i] = 0.0f;
        xrow[i] = min(i, m - 1) * in;
    }
    if (q < r) {
        /* unrolled so that several loads of A and x are in flight at once */
#pragma unroll 8
        for (int p = p0 + s; p < p1; p += ns) {
            const float av = a[p * sp + q * sq];
#pragma unroll
            for (int i = 0; i < MR; i++)
                acc[i] = fma(x[xrow[i] + p], av, acc[i]);
        }
    }
    lowrank_reduce(acc, r, rp, h, red, lid);
}

inline void lowrank_h(const __global float *x, int m, int in, int p0, int p1,
                      const __global float *a, int r, int rp, __local float *h,
                      __local float *red, int lid)
{
    lowrank_h_strided(x, m, in, p0, p1, a, r, 1, r, rp, h, red, lid);
}
