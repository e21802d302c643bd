/*
 * LoRA backward for few tokens in one launch, the weights in the default layout (W in x out,
 * A in x r, B r x out; x T x in, dy T x out, dx T x in; all row-major, T <= MR <= 16,
 * r <= 64):
 *   u  = scale * dy * B^T          (T x r, never stored)
 *   dx = dy * W^T + u * A^T
 *   dA = x^T * u
 *   dB = scale * (x * A)^T * dy
 * each overwritten (beta = 0) or added to (beta = 1). With VEC = 4, out % 4 == 0 and the
 * buffers start 16-byte aligned.
 *
 * Work decomposition: work-groups of GROUP = WARPS * 32 work-items, of two kinds, so that
 * every gradient comes out of the one launch (each launch on a queue costs microseconds of
 * its own, more than these products at one token).
 *   Row groups, g < ceil(in / WARPS): each first sums dy * B^T into local memory
 *   (lowrank_h_strided, B read down its rows; redundant across the groups, B and dy from
 *   cache), then warp w takes row i = g * WARPS + w of W: its 32 work-items stride over the row
 *   VEC at a time, each reading W[i] once and dy's rows at the same columns (from cache),
 *   keeping a sum per token, add u[t] . A[i], and the sums are added through local memory;
 *   work-item t writes dx[t][i]. The group then writes dA's rows i: sum over t of
 *   x[t][i] * u[t][q].
 *   dB groups, the rest: each sums h = x * A into local memory, then takes GROUP * VEC
 *   columns of dy and writes dB[q][o] = scale * sum over t of h[t][q] * dy[t][o] for every q.
 * Reads: W once; B and dy once per row group, x and A once per dB group, from cache (the host
 * runs this kernel only where B is small beside W); writes every gradient once, reads it
 * where beta = 1.
 *
 * Tuning parameters: WARPS (GROUP = 32 * WARPS, a power of two), MR, VEC.
 */
#ifndef WARPS
#define WARPS 8
#endif
#if GROUP != WARPS * 32
#error "GROUP must be WARPS * 32"
#endif

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
lora_backward_few(const int tokens, const int in, const int out, const int r, const int rp,
                  const float scale, const float beta, const int has_dx,
                  const __global float *x, const __global float *w, const __global float *a,
                  const __global float *b, const __global float *dy, __global float *dx,
                  __global float *da, __global float *db)
{
    __local float red[4096];
    __local float uh[MR * RMAX];
    const int lid = (int)get_local_id(0), g = (int)get_group_id(0);
    const int row_groups = (in + WARPS - 1) / WARPS;
    const int ov = out / VEC;
    if (g < row_groups) {
        lowrank_h_strided(dy, tokens, out, 0, out, b, 1, out, r, rp, uh, red, lid);
        const int warp = lid / 32, lane = lid % 32, i = g * WARPS + warp;
        float acc[MR];
#pragma unroll
        for (int t = 0; t < MR; t++)
            acc[t] = 0.0f;
        if (has_dx && i < in) {
            const __global floatv *wi = (const __global floatv *)(w + (size_t)i * (size_t)out);
            const __global floatv *dyv = (const __global floatv *)dy;
#pragma unroll 4
            for (int p = lane; p < ov; p += 32) {
                const floatv wv = wi[p];
#pragma unroll
                for (int t = 0; t < MR; t++)
                    if (t < tokens)
                        acc[t] += HSUM(dyv[t * ov + p] * wv);
            }
            for (int q = lane; q < r; q += 32) {
                const float aq = scale * a[(size_t)i * (size_t)r + q];
#pragma unroll
                for (int t = 0; t < MR; t++)
                    acc[t] = fma(uh[t * RMAX + q], aq, acc[t]);
            }
        }
        /* the 32 sums of each warp, per token: red holds MR * GROUP <= 4096 floats */
#pragma unroll
        for (int t = 0; t < MR; t++)
            red[t * GROUP + lid] = acc[t];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int width = 16; width > 0; width /= 2) {
            if (lane < width) {
#pragma unroll
                for (int t = 0; t < MR; t++)
                    red[t * GROUP + lid] += red[t * GROUP + lid + width];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (has_dx && i < in && lane < tokens) {
            const float v = red[lane * GROUP + warp * 32];
            __global float *at = dx + (size_t)lane * (size_t)in + i;
            *at = beta != 0.0f ? *at + v : v;
        }
        for (int e = lid; e < WARPS * r; e += GROUP) {
            const int row = g * WARPS + e / r, q = e % r;
            if (row < in) {
                float s = 0.0f;
                for (int t = 0; t < tokens; t++)
                    s = fma(x[(size_t)t * (size_t)in + row], uh[t * RMAX + q], s);
                s *= scale;
                __global float *at = da + (size_t)row * (size_t)r + q;
                *at = beta != 0.0f ? *at + s : s;
            }
        }
    } else {
        lowrank_h(x, tokens, in, 0, in, a, r, rp, uh, red, lid);
        const int jv = (g - row_groups) * GROUP + lid;
        if (jv < ov) {
            const __global floatv *dyv = (const __global floatv *)dy;
            floatv d[MR];
#pragma unroll
            for (int t = 0; t < MR; t++)
                d[t] = t < tokens ? dyv[t * ov + jv] : (floatv)(0.0f);
            for (int q = 0; q < r; q++) {
                floatv s = (floatv)(0.0f);
#pragma unroll
                for (int t = 0; t < MR; t++)
                    if (t < tokens)
                        s = fma((floatv)(uh[t * RMAX + q]), d[t], s);
                s *= scale;
                __global floatv *at = (__global floatv *)(db + (size_t)q * (size_t)out) + jv;
                *at = beta != 0.0f ? *at + s : s;
            }
        }
    }
}
