/*
 * LoRA epilogue for many tokens: y += scale * (x * A) * B, with x Txin, A inxr (r <= 64),
 * B rxout, y Txout, row-major; it follows a GEMM that wrote y = x * W. With VEC = 4,
 * out % 4 == 0 and the buffers start 16-byte aligned.
 *
 * Work decomposition: one work-group of WG work-items per MR consecutive tokens,
 * ceil(T / MR) work-groups. The group computes its h = x * A (MRxr) into local memory
 * (lowrank.cl), then walks the columns: work-item c takes column vectors c, c + WG, ..., reads
 * B[q][c] once for all q < r, applies it to its MR tokens and updates y.
 * Reads: x once, y once, A and B once per work-group (from cache); writes y once: the
 * traffic is 8 bytes per element of y plus x.
 *
 * Tuning parameters: WG, VEC (see common.cl) and MR (tokens per work-group).
 */
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
lora_update(int tokens, int in, int out, int r, int rp, float scale, const __global float *x,
            const __global float *a, const __global float *b, __global float *y)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[4096];
    __local float h[MR * RMAX];
    const int lid = (int)get_local_id(0);
    const int t0 = (int)get_group_id(0) * MR, m = min(MR, tokens - t0);
    lowrank_h(x + (size_t)t0 * (size_t)in, m, in, 0, in, a, r, rp, h, red, lid);

    const int nv = out / VEC;
    const __global floatv *bv = (const __global floatv *)b;
    __global floatv *yv = (__global floatv *)(y + (size_t)t0 * (size_t)out);
    for (int jv = lid; jv < nv; jv += GROUP) {
        floatv acc[MR];
#pragma unroll
        for (int i = 0; i < MR; i++)
            acc[i] = (floatv)(0.0f);
#pragma unroll 8
        for (int q = 0; q < r; q++) {
            const floatv bq = bv[q * nv + jv];
#pragma unroll
            for (int i = 0; i < MR; i++)
                acc[i] = fma((floatv)(h[i * RMAX + q]), bq, acc[i]);
        }
#pragma unroll
        for (int i = 0; i < MR; i++)
            if (i < m)
                yv[i * nv + jv] = fma((floatv)(scale), acc[i], yv[i * nv + jv]);
    }
}
