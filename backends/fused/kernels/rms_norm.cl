/*
 * RMS norm: y[i][j] = x[i][j] / sqrt(mean_j x[i][j]^2 + eps) * w[j].
 *
 * Layout: x and y rowsxcols, row-major, y may be x; w is 1xcols. With VEC = 4, cols % 4 == 0
 * and the buffers start 16-byte aligned.
 * Work decomposition: one slot of T = WG / ROWS work-items per row, ROWS rows per work-group,
 * ceil(rows / ROWS) work-groups; work-item t of a slot takes vectors t, t + T, ...
 *
 * rms_norm_cached (CACHE > 0, rows of at most T * VEC * CACHE elements): the row and its
 * weights are held in registers, both loaded before the reduction: x read once, y written
 * once, w read once per row (from cache): 8 bytes per element from memory; one slot
 * reduction.
 * rms_norm_looped (any length): pass 1 sums squares, pass 2 reads x again and writes y.
 *
 * Any magnitude: the squares are summed over the row scaled by 2^-e, e from the row's largest
 * magnitude (scale_exponent, common.cl), so rows of 1e30, FLT_MAX or 1e-30 (eps = 0) neither
 * overflow nor underflow; eps is scaled alike (scaled_rstd). The cached kernel finds e with
 * one more slot reduction (a maximum over registers); the looped one keeps a running exponent
 * per work-item, rescaling its partial sum when a larger binade appears, and reduces the
 * exponents once: no extra pass over memory.
 *
 * Tuning parameters: WG, ROWS, VEC (see common.cl) and CACHE (vectors per work-item held in
 * registers; 0 builds only the looped kernel).
 */
#ifndef CACHE
#define CACHE 4
#endif

#if CACHE > 0
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
rms_norm_cached(const __global float *x, const __global float *w, __global float *y, int rows,
                int cols, float eps)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = cols / VEC;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *xr = (const __global floatv *)(x + off);
    const __global floatv *wv = (const __global floatv *)w;
    __global floatv *yr = (__global floatv *)(y + off);

    /* w is loaded with x, before the reduction, so that its latency is not paid after it */
    floatv v[CACHE], wr[CACHE];
    slot_load(v, CACHE, xr, live, n, t, (floatv)(0.0f));
    slot_load(wr, CACHE, wv, live, n, t, (floatv)(0.0f));
    const int e = scale_held_row(v, CACHE, red, slot, t);
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < CACHE; i++)
        sq += HSUM(v[i] * v[i]);
    sq = slot_sum(sq, red, slot, t);
    const float r = scaled_rstd(sq / (float)cols, eps, e).x;
    if (live) {
#pragma unroll
        for (int i = 0; i < CACHE; i++) {
            const int j = t + i * T;
            if (j < n)
                yr[j] = v[i] * r * wr[i];
        }
    }
}
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
rms_norm_looped(const __global float *x, const __global float *w, __global float *y, int rows,
                int cols, float eps)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = live ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *xr = (const __global floatv *)(x + off);
    const __global floatv *wv = (const __global floatv *)w;
    __global floatv *yr = (__global floatv *)(y + off);

    /* Squares of x * 2^-e, e the largest exponent seen so far by this work-item. */
    float sq = 0.0f, f = 0x1p126f, above = 0x1p-125f; /* 2^-e and 2^(e+1) for e = -126 */
    int e = -126;
    for (int j = t; j < n; j += T) {
        const floatv v = xr[j];
        const float vm = HMAX(fabs(v));
        if (vm >= above) {
            const int en = scale_exponent(vm);
            sq = ldexp(sq, 2 * (e - en));
            e = en;
            f = pow2(-e);
            above = pow2(e + 1);
        }
        const floatv s = v * f;
        sq += HSUM(s * s);
    }
    const int top = (int)slot_max((float)e, red, slot, t);
    sq = slot_sum(ldexp(sq, 2 * (e - top)), red, slot, t);
    const float ft = pow2(-top);
    const float r = scaled_rstd(sq / (float)cols, eps, top).x;
    for (int j = t; j < n; j += T)
        yr[j] = xr[j] * ft * r * wv[j];
}
