/*
 * Row softmax: y[i][j] = exp(x[i][j] - max_j x[i]) / sum_j exp(x[i][j] - max_j x[i]).
 *
 * Layout: x and y rowsxcols, row-major, y may be x (each element is read and then written by
 * the same work-item). With VEC = 4, cols % 4 == 0 and the buffers start 16-byte aligned.
 * Work decomposition: one slot of T = WG / ROWS work-items per row, ROWS rows per work-group,
 * ceil(rows / ROWS) work-groups; work-item t of a slot takes vectors t, t + T, t + 2T, ...
 *
 * softmax_cached (CACHE > 0, for rows of at most T * VEC * CACHE elements): the row is held in
 * registers, so each element is read once and written once (8 bytes per element); two slot
 * reductions (max, then sum).
 * softmax_looped (any length): pass 1 keeps a running maximum and a sum rescaled to it (online
 * softmax), pass 2 reads again and writes: 12 bytes per element.
 *
 * Tuning parameters: WG, ROWS, VEC (see common.cl) and
 *   CACHE  vectors each work-item holds in registers; 0 builds only the looped kernel.
 */
#ifndef CACHE
#define CACHE 4
#endif

#if CACHE > 0
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
softmax_cached(const __global float *x, __global float *y, int rows, int cols)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = cols / VEC;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *xr = (const __global floatv *)(x + off);
    __global floatv *yr = (__global floatv *)(y + off);

    floatv v[CACHE];
    slot_load(v, CACHE, xr, live, n, t, (floatv)(-INFINITY));
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < CACHE; i++)
        m = fmax(m, HMAX(v[i]));
    m = slot_max(m, red, slot, t);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < CACHE; i++) {
        if (t + i * T < n) {
            v[i] = exp(v[i] - m);
            s += HSUM(v[i]);
        }
    }
    s = slot_sum(s, red, slot, t);
    const float inv = 1.0f / s;
    if (live) {
#pragma unroll
        for (int i = 0; i < CACHE; i++) {
            const int j = t + i * T;
            if (j < n)
                yr[j] = v[i] * inv;
        }
    }
}
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
softmax_looped(const __global float *x, __global float *y, int rows, int cols)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = live ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *xr = (const __global floatv *)(x + off);
    __global floatv *yr = (__global floatv *)(y + off);

    float m = -INFINITY, s = 0.0f;
    for (int j = t; j < n; j += T) {
        const floatv v = xr[j];
        const float nm = fmax(m, HMAX(v));
        /* m == nm also covers m = nm = -inf, where exp(m - nm) would be NaN; likewise a
         * work-item whose values so far are all -inf (a mask) adds exp(-inf) = 0 for them, not
         * exp(-inf - -inf) = NaN (a NaN among them still gives NaN) */
        s = (m == nm ? s : s * exp(m - nm)) + HSUM(exp(v - (nm == -INFINITY ? 0.0f : nm)));
        m = nm;
    }
    const float rm = slot_max(m, red, slot, t);
    s = m == rm ? s : s * exp(m - rm);
    s = slot_sum(s, red, slot, t);
    const float inv = 1.0f / s;
    for (int j = t; j < n; j += T)
        yr[j] = exp(xr[j] - rm) * inv;
}
