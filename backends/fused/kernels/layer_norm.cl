/*
 * Layer norm: y[i][j] = (x[i][j] - mean_i) / sqrt(var_i + eps) * gamma[j] + beta[j], with the
 * biased variance of row i.
 *
 * Layout: x and y rowsxcols, row-major, y may be x; gamma and beta are 1xcols. With VEC = 4,
 * cols % 4 == 0 and the buffers start 16-byte aligned.
 * Work decomposition: one slot of T = WG / ROWS work-items per row, ROWS rows per work-group,
 * ceil(rows / ROWS) work-groups; work-item t of a slot takes vectors t, t + T, ...
 *
 * layer_norm_cached (CACHE > 0, rows of at most T * VEC * CACHE elements): the row is held in
 * registers and the variance is taken over deviations from the mean (two passes over
 * registers, no E[x^2] - E[x]^2 cancellation): x read once, y written once, gamma and beta once
 * per row (from cache); two slot reductions.
 * layer_norm_looped (any length): pass 1 runs Welford's update per work-item and merges the
 * partial (count, mean, M2) triples in a tree (Chan et al.); pass 2 reads x again and writes.
 *
 * Tuning parameters: WG, ROWS, VEC (see common.cl) and CACHE (vectors per work-item held in
 * registers; 0 builds only the looped kernel).
 */
#ifndef CACHE
#define CACHE 4
#endif

#if CACHE > 0
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
layer_norm_cached(const __global float *x, const __global float *gamma,
                  const __global float *beta, __global float *y, int rows, int cols, float eps)
{
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = cols / VEC;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *xr = (const __global floatv *)(x + off);
    const __global floatv *gv = (const __global floatv *)gamma;
    const __global floatv *bv = (const __global floatv *)beta;
    __global floatv *yr = (__global floatv *)(y + off);

    /* gamma and beta are loaded with x, before the reductions, so that their latency is not
     * paid after them */
    floatv v[CACHE], g[CACHE], b[CACHE];
    slot_load(v, CACHE, xr, live, n, t, (floatv)(0.0f));
    slot_load(g, CACHE, gv, live, n, t, (floatv)(0.0f));
    slot_load(b, CACHE, bv, live, n, t, (floatv)(0.0f));
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < CACHE; i++)
        s += HSUM(v[i]);
    const float mean = slot_sum(s, red, slot, t) / (float)cols;
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < CACHE; i++) {
        if (t + i * T < n) {
            v[i] -= mean;
            sq += HSUM(v[i] * v[i]);
        }
    }
    sq = slot_sum(sq, red, slot, t);
    const float r = 1.0f / sqrt(sq / (float)cols + eps);
    if (live) {
#pragma unroll
        for (int i = 0; i < CACHE; i++) {
            const int j = t + i * T;
            if (j < n)
                yr[j] = v[i] * r * g[i] + b[i];
        }
    }
}
#endif

/* Merges the (count, mean, M2) triples of a slot; the result is in element 0 of each array. */
inline void slot_welford(float *cnt, float *mean, float *m2, __local float *rc,
                         __local float *rm, __local float *rq, int slot, int t)
{
    rc += slot * T;
    rm += slot * T;
    rq += slot * T;
    rc[t] = *cnt;
    rm[t] = *mean;
    rq[t] = *m2;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = T / 2; s > 0; s >>= 1) {
        if (t < s) {
            const float na = rc[t], nb = rc[t + s], nab = na + nb;
            if (nb > 0.0f) {
                const float d = rm[t + s] - rm[t];
                rm[t] += d * (nb / nab);
                rq[t] += rq[t + s] + d * d * (na * nb / nab);
                rc[t] = nab;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    *cnt = rc[0];
    *mean = rm[0];
    *m2 = rq[0];
    barrier(CLK_LOCAL_MEM_FENCE);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
layer_norm_looped(const __global float *x, const __global float *gamma,
                  const __global float *beta, __global float *y, int rows, int cols, float eps)
{
    __local float rc[WG], rm[WG], rq[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = live ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *xr = (const __global floatv *)(x + off);
    const __global floatv *gv = (const __global floatv *)gamma;
    const __global floatv *bv = (const __global floatv *)beta;
    __global floatv *yr = (__global floatv *)(y + off);

    /* Each vector is a batch of VEC values merged into the running triple. */
    float cnt = 0.0f, mean = 0.0f, m2 = 0.0f;
    for (int j = t; j < n; j += T) {
        const floatv v = xr[j];
        const float bm = HSUM(v) / (float)VEC;
        const floatv dv = v - bm;
        const float bq = HSUM(dv * dv);
        const float nab = cnt + (float)VEC, d = bm - mean;
        mean += d * ((float)VEC / nab);
        m2 += bq + d * d * (cnt * (float)VEC / nab);
        cnt = nab;
    }
    slot_welford(&cnt, &mean, &m2, rc, rm, rq, slot, t);
    const float r = 1.0f / sqrt(m2 / (float)cols + eps);
    for (int j = t; j < n; j += T)
        yr[j] = (xr[j] - mean) * r * gv[j] + bv[j];
}
