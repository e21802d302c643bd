/*
 * Layer norm: y[i][j] = (x[i][j] - mean_i) / sqrt(var_i + eps) * gamma[j] + beta[j], with the
 * biased variance of row i.
 *
 * Layout: x and y rowsxcols, row-major, y may be x; gamma and beta are 1xcols. With VEC = 4,
 * cols % 4 == 0 and the buffers start 16-byte aligned.
 * Work decomposition: one slot of T = WG / ROWS work-items per row, ROWS rows per work-group,
 * ceil(rows / ROWS) work-groups; work-item t of a slot takes vectors t, t + T, ...
 *
 * Any magnitude: the row is scaled by 2^-e, e from its largest magnitude (scale_exponent,
 * common.cl), so that neither the sums nor the squares overflow or underflow (rows of 1e20,
 * FLT_MAX, 1e-30 with eps = 0); eps is scaled alike (scaled_rstd). The sum is a TwoSum pair
 * and the mean is kept as mean + mean_lo (mean2), so that x - mean keeps its digits when the
 * mean is far from zero against the spread (mean 1e4, sigma 0.02: a float mean alone is off
 * by 2 % of sigma).
 *
 * layer_norm_cached (CACHE > 0, rows of at most T * VEC * CACHE elements): the row is held in
 * registers: a maximum, the pair sum, then the variance over deviations from the mean (no
 * E[x^2] - E[x]^2 cancellation): x read once, y written once, gamma and beta once per row
 * (from cache); three slot reductions.
 * layer_norm_looped (any length): pass 1 sums the row as a pair with a running exponent per
 * work-item (a partial sum is rescaled when a larger binade appears); pass 2 sums squared
 * deviations; pass 3 reads x again and writes y.
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
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG], red2[WG];
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
    const int e = scale_held_row(v, CACHE, red, slot, t);
    float hi = 0.0f, lo = 0.0f;
#pragma unroll
    for (int i = 0; i < CACHE; i++)
        sum2_add(&hi, &lo, v[i]);
    slot_sum2(&hi, &lo, red, red2, slot, t);
    float mean_lo;
    const float mean = mean2(hi, lo, (float)cols, 1.0f / (float)cols, &mean_lo);
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < CACHE; i++) {
        if (t + i * T < n) {
            v[i] = (v[i] - mean) - mean_lo;
            sq += HSUM(v[i] * v[i]);
        }
    }
    sq = slot_sum(sq, red, slot, t);
    const float r = scaled_rstd(sq / (float)cols, eps, e).x;
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

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
layer_norm_looped(const __global float *x, const __global float *gamma,
                  const __global float *beta, __global float *y, int rows, int cols, float eps)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG], red2[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = live ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *xr = (const __global floatv *)(x + off);
    const __global floatv *gv = (const __global floatv *)gamma;
    const __global floatv *bv = (const __global floatv *)beta;
    __global floatv *yr = (__global floatv *)(y + off);

    /* The pair sum of x * 2^-e, e the largest exponent seen so far by this work-item. */
    float hi = 0.0f, lo = 0.0f, f = 0x1p126f, above = 0x1p-125f; /* e = -126 */
    int e = -126;
    for (int j = t; j < n; j += T) {
        const floatv v = xr[j];
        const float vm = HMAX(fabs(v));
        if (vm >= above) {
            const int en = scale_exponent(vm);
            hi = ldexp(hi, e - en);
            lo = ldexp(lo, e - en);
            e = en;
            f = pow2(-e);
            above = pow2(e + 1);
        }
        sum2_add(&hi, &lo, v * f);
    }
    const int top = (int)slot_max((float)e, red, slot, t);
    hi = ldexp(hi, e - top);
    lo = ldexp(lo, e - top);
    slot_sum2(&hi, &lo, red, red2, slot, t);
    float mean_lo;
    const float mean = mean2(hi, lo, (float)cols, 1.0f / (float)cols, &mean_lo);
    const float ft = pow2(-top);
    float sq = 0.0f;
    for (int j = t; j < n; j += T) {
        const floatv d = (xr[j] * ft - mean) - mean_lo;
        sq += HSUM(d * d);
    }
    sq = slot_sum(sq, red, slot, t);
    const float r = scaled_rstd(sq / (float)cols, eps, top).x;
    for (int j = t; j < n; j += T)
        yr[j] = ((xr[j] * ft - mean) - mean_lo) * r * gv[j] + bv[j];
}
