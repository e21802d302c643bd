/*
 * LoRA forward for few tokens, one launch: y = x * W + scale * (x * A) * B, with x Txin
 * (T <= MR <= 16), W inxout, A inxr (r <= 64), B rxout, y Txout, row-major. With VEC = 4,
 * out % 4 == 0 and the buffers start 16-byte aligned.
 *
 * Work decomposition: as gemm_rows (gemv.cl), a work-group of TN * KS work-items owns TN * VEC
 * columns of W, B and y. Each work-group first computes the whole h = x * A (Txr, tiny) into
 * local memory (lowrank.cl): redundant across work-groups, but A and x are small and stay in
 * cache, while the pass over W, which dominates, is read exactly once. Then the strip of
 * x * W is accumulated with split k, reduced, and the low-rank term h * B added per column as
 * y is written.
 * Reads: W once (4 bytes per element), B once, x and A once per work-group from cache;
 * writes y once (every element: y is never read).
 *
 * Tuning parameters: TN, KS, VEC, MR, UNROLL as gemv.cl.
 */
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
lora_forward(int tokens, int in, int out, int r, int rp, float scale, const __global float *x,
             const __global float *w, const __global float *a, const __global float *b,
             __global float *y)
{
    __local floatv red[RED_FLOATS / VEC];
    __local float h[MR * RMAX];
    const int lid = (int)get_local_id(0);
    if (r > 0)
        lowrank_h(x, tokens, in, a, r, rp, h, (__local float *)red, lid);
    const int nv = out / VEC, jv0 = (int)get_group_id(0) * TN, jv = jv0 + lid % TN;
    floatv acc[MR];
    strip_accumulate(acc, x, in, tokens, (const __global floatv *)w, nv, in, min(jv, nv - 1),
                     lid / TN);
    strip_store(acc, red, tokens, nv, jv0, lid, 1.0f, 0.0f, (__global floatv *)y, h, RMAX,
                (const __global floatv *)b, r, scale);
}
