/*
 * LoRA forward for few tokens: y = x * W + scale * (x * A) * B, with x Txin
 * (T <= MR <= 16), W inxout, A inxr (r <= 64), B rxout, y Txout, row-major. With VEC = 4,
 * out % 4 == 0 and the buffers start 16-byte aligned.
 *
 * Work decomposition: as gemm_rows (gemv.cl), a work-group of TN * KS work-items owns TN * VEC
 * columns of W, B and y. Each work-group first computes the whole h = x * A (Txr, tiny) into
 * local memory (lowrank.cl): redundant across work-groups, but A and x are small and stay in
 * cache, while the pass over W, which dominates, is read exactly once. Then the strip of
 * x * W is accumulated with split k, the low-rank term h * B added with the same split (each
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
 * Tuning parameters: TN, KS, VEC, MR, UNROLL, KG as gemv.cl.
 */
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
lora_forward(int tokens, int in, int out, int r, int rp, float scale, const __global float *x,
             const __global float *w, const __global float *a, const __global float *b,
             __global float *y, __global float *part, __global int *count)
{
    __local floatv red[RED_FLOATS / VEC];
    __local float h[MR * RMAX];
    __local int last;
    const int lid = (int)get_local_id(0), nv = out / VEC;
    int g, p0, p1;
    const int strip = strip_place(nv, in, &g, &p0, &p1);
    if (r > 0)
        lowrank_h(x, tokens, in, p0, p1, a, r, rp, h, (__local float *)red, lid);
    const int jv0 = strip * TN, jv = jv0 + lid % TN;
    __global floatv *parts = (__global floatv *)part + (size_t)strip * (KG * MR * TN);
    floatv acc[MR];
    strip_accumulate(acc, x, in, tokens, (const __global floatv *)w, nv, p0, p1,
                     min(jv, nv - 1), lid / TN);
    strip_add_lowrank(acc, tokens, h, RMAX, (const __global floatv *)b, nv, min(jv, nv - 1),
                      lid / TN, r, scale);
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
    __local floatv red[RED_FLOATS / VEC];
    __local float h[MR * RMAX];
    __local int last;
    const int lid = (int)get_local_id(0), nv = out / VEC;
    for (int e = lid; e < tokens * RMAX; e += GROUP) {
        if (e % RMAX < r) {
            float s = 0.0f;
            for (int q = 0; q < parts; q++)
                s += part[(size_t)q * (MR * RMAX) + e];
            h[e] = s;
        }
    }
    int g, p0, p1;
    const int strip = strip_place(nv, in, &g, &p0, &p1);
    const int jv0 = strip * TN, jv = jv0 + lid % TN;
    __global floatv *kp = (__global floatv *)kpart + (size_t)strip * (KG * MR * TN);
    floatv acc[MR];
    strip_accumulate(acc, x, in, tokens, (const __global floatv *)w, nv, p0, p1,
                     min(jv, nv - 1), lid / TN);
    barrier(CLK_LOCAL_MEM_FENCE); /* h complete */
    if (g == 0)
        strip_add_lowrank(acc, tokens, h, RMAX, (const __global floatv *)b, nv,
                          min(jv, nv - 1), lid / TN, r, scale);
    strip_store(acc, red, tokens, nv, jv0, lid, 1.0f, 0.0f, (__global floatv *)y,
                kp + g * (MR * TN));
    if (KG > 1)
        strip_combine(tokens, nv, jv0, lid, 1.0f, 0.0f, (__global floatv *)y, kp,
                      count + strip, &last);
}
