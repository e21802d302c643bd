/*
 * Residual add + RMS norm, forward and backward (a decoder layer's pre-norm on its residual
 * stream).
 *
 * Forward: h = x + r; y = h / sqrt(mean_j h^2 + eps) * w.
 * Backward: rstd = 1 / sqrt(mean_j h^2 + eps), g = w * dy, xhat = h * rstd;
 * dh = rstd * (g - xhat * mean_j(g * xhat)) + dres (the gradient of x and of r alike; dres, the
 * gradient reaching h along the residual path, may be absent: 0); dw = sum over rows of
 * dy * xhat (optional).
 *
 * Layout: x, r, h, y, dy, dres and dh rows x cols, row-major, activations (act_t, elem.cl: float,
 * or bf16 under ACT_BF16); w and dw 1 x cols float. Forward: h may be x or r (each element is
 * read before it is written, by the same work-item); y aliases nothing. Backward: dh may be dy
 * or dres. In bf16, h is stored rounded and y is computed from the rounded h, the value that the
 * backward reads. With VEC = 4, cols % 4 == 0 and the buffers start 16-byte aligned (8 for bf16).
 *
 * Work decomposition as the row kernels (common.cl): a slot of T = WG / ROWS work-items per row,
 * ROWS rows per work-group, ceil(rows / ROWS) work-groups (the single pass of the backward:
 * `groups` work-groups, each a chunk of rows); work-item t of a slot takes vectors t, t + T, ...
 *
 * Any magnitude, as rms_norm.cl and rows_backward.cl: squares are summed over the row scaled by
 * 2^-e, e from its largest magnitude (scale_held_row, or a running exponent per work-item in the
 * looped kernels), eps scaled alike (scaled_rstd), so rows of 1e30, FLT_MAX or 1e-30 (eps = 0)
 * neither overflow nor underflow; xhat is taken in the scaled row, dh with the true rstd.
 *
 * Forward kernels (bytes per element, fp32; w's reads come from cache):
 *   add_rms_norm_cached (CACHE > 0, rows of at most T * VEC * CACHE elements): the row of h held
 *     in registers: x and r read once, h and y written once: 16 bytes.
 *   add_rms_norm_looped (any length): pass 1 reads x and r, writes h and sums its squares; pass
 *     2 reads h back and writes y: 20 bytes.
 * Backward kernels:
 *   add_rms_norm_backward_fused (CACHE > 0): dh and dw's partial sums in one pass where a row
 *     fits in a slot's registers (as rows_backward.cl's norm_backward_fused): work-group g takes
 *     rows g * chunk .. (g + 1) * chunk - 1, ROWS at a time; per row one slot reduction (sum h^2
 *     and sum g * h, unscaled; again scaled where a row of the group was out of range); dh
 *     written; compensated sums of dy * xhat per column, added over the slots in slot order and
 *     written as part[g * cols + j] (part NULL: no dw). h and dy read once, dres once (with the
 *     row's h and dy, ahead of its reductions), dh written once: 16 bytes (12 without dres).
 *     Then add_rms_norm_weight_combine (groups partials per column).
 *   add_rms_norm_backward_rows (any length, no dw): per row the statistics (a pass over h),
 *     mean(g * xhat) (h, dy), dh (h, dy, dres): h read three times, dy twice.
 *   For dw on rows too long for the registers, deterministic and without atomics, before dh
 *   (so that dh may overwrite dy): add_rms_norm_backward_stats writes each row's statistics,
 *   add_rms_norm_weight_partials gives one work-item to each (column, chunk of rows) and sums
 *   dy * xhat over its rows in row order, add_rms_norm_weight_combine adds each column's chunks
 *   in a fixed order, add_rms_norm_backward_apply writes dh from the statistics (h, dy, dres
 *   read once, dh written once).
 * stats: 4 floats per row: rs (rstd in the scaled row's units), rt (the true rstd), e (the row's
 * scale exponent, a float holding an integer), and mean_j(g * xhat).
 *
 * Tuning parameters (-D; defaults below): WG, ROWS, VEC (common.cl), CACHE, PREFETCH,
 * COMBINE_COLS, COMBINE_SLICES.
 */
#ifndef CACHE
#define CACHE 4 /* vectors per work-item held in registers; 0 builds only the looped kernels */
#endif
#ifndef PREFETCH
#define PREFETCH 0 /* 1: the single pass loads a slot's next row before reducing the current one */
#endif
#ifndef COMBINE_COLS
#define COMBINE_COLS 32 /* add_rms_norm_weight_combine: columns per work-group */
#endif
#ifndef COMBINE_SLICES
#define COMBINE_SLICES 8 /* add_rms_norm_weight_combine: work-items per column */
#endif

/* act_roundv(v): the value act_storev (elem.cl) would store for v. */
#if ACT_BF16 && VEC == 4
inline float4 act_roundv(float4 v)
{
    const uint4 u = as_uint4(v);
    const uint4 b = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return select(as_float4(b), v, isnan(v));
}
#elif ACT_BF16
inline float act_roundv(float v)
{
    const uint u = as_uint(v);
    return isnan(v) ? v : as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}
#else
#define act_roundv(v) (v)
#endif

/* Compensated float sum: *sum += v, *comp carrying what the adds lost; an infinite sum carries
 * nothing (inf - inf would turn it into NaN). */
inline void comp_add(float *sum, float *comp, float v)
{
    const float y = v - *comp, t = *sum + y;
    *comp = isfinite(t) ? (t - *sum) - y : 0.0f;
    *sum = t;
}

#if CACHE > 0
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
add_rms_norm_cached(const __global act_t *x, const __global act_t *r, const __global float *w,
                    __global act_t *h, __global act_t *y, int rows, int cols, float eps)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = cols / VEC;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;

    /* every load (x, r and w) issued before the first store, which may alias x or r */
    floatv v[CACHE], wr[CACHE];
#pragma unroll
    for (int i = 0; i < CACHE; i++) {
        const int j = t + i * T;
        v[i] = live && j < n ? act_loadv(x + off, j) + act_loadv(r + off, j) : (floatv)(0.0f);
    }
    slot_load(wr, CACHE, (const __global floatv *)w, live, n, t, (floatv)(0.0f));
#pragma unroll
    for (int i = 0; i < CACHE; i++) {
        const int j = t + i * T;
        v[i] = act_roundv(v[i]);
        if (live && j < n)
            act_storev(h + off, j, v[i]);
    }
    const int e = scale_held_row(v, CACHE, red, slot, t);
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < CACHE; i++)
        sq += HSUM(v[i] * v[i]);
    sq = slot_sum(sq, red, slot, t);
    const float rs = scaled_rstd(sq / (float)cols, eps, e).x;
    if (live) {
#pragma unroll
        for (int i = 0; i < CACHE; i++) {
            const int j = t + i * T;
            if (j < n)
                act_storev(y + off, j, v[i] * rs * wr[i]);
        }
    }
}
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
add_rms_norm_looped(const __global act_t *x, const __global act_t *r, const __global float *w,
                    __global act_t *h, __global act_t *y, int rows, int cols, float eps)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = live ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *wv = (const __global floatv *)w;

    /* squares of h * 2^-e, e the largest exponent this work-item has seen so far */
    float sq = 0.0f, f = 0x1p126f, above = 0x1p-125f; /* 2^-e and 2^(e+1) for e = -126 */
    int e = -126;
    for (int j = t; j < n; j += T) {
        const floatv v = act_roundv(act_loadv(x + off, j) + act_loadv(r + off, j));
        act_storev(h + off, j, v);
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
    const float rs = scaled_rstd(sq / (float)cols, eps, top).x;
    /* h as this work-item stored it in pass 1 (the same elements: visible to it) */
    for (int j = t; j < n; j += T)
        act_storev(y + off, j, act_loadv(h + off, j) * ft * rs * wv[j]);
}

/* A row's statistics: rstd in the scaled row's units (rs) and true (rt), the scale 2^-e (f) and
 * e. */
typedef struct rms_row {
    float rs, rt, f;
    int e;
} rms_row;

/* The statistics of the row hr of n vectors, in one pass (a running exponent per work-item, as
 * add_rms_norm_looped); every work-item of the group calls it. red: WG floats. */
inline rms_row rms_row_stats(const __global act_t *hr, int n, int cols, float eps,
                             __local float *red, int slot, int t)
{
    float sq = 0.0f, f = 0x1p126f, above = 0x1p-125f;
    int e = -126;
    for (int j = t; j < n; j += T) {
        const floatv v = act_loadv(hr, j);
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
    rms_row st;
    st.e = (int)slot_max((float)e, red, slot, t);
    sq = slot_sum(ldexp(sq, 2 * (e - st.e)), red, slot, t);
    st.f = pow2(-st.e);
    const float2 r = scaled_rstd(sq / (float)cols, eps, st.e);
    st.rs = r.x;
    st.rt = r.y;
    return st;
}

/* mean_j(g * xhat) of the row (g = w * dy), from a pass over h and dy. */
inline float rms_row_sgx(const __global act_t *hr, const __global act_t *dyr,
                         const __global floatv *wv, int n, int cols, rms_row st,
                         __local float *red, int slot, int t)
{
    const floatv f = (floatv)(st.f);
    float s = 0.0f;
    for (int j = t; j < n; j += T)
        s += HSUM(wv[j] * act_loadv(dyr, j) * (act_loadv(hr, j) * f));
    return slot_sum(s, red, slot, t) * st.rs / (float)cols;
}

/* dh = rt * (g - xhat * sgx) + dres over the row (dresr NULL: no dres); each element's inputs
 * are read before it is written, by the same work-item. */
inline void rms_row_apply(const __global act_t *hr, const __global floatv *wv,
                          const __global act_t *dyr, const __global act_t *dresr,
                          __global act_t *dhr, int n, rms_row st, float sgx, int t)
{
    const floatv f = (floatv)(st.f);
    for (int j = t; j < n; j += T) {
        const floatv xhat = act_loadv(hr, j) * f * st.rs;
        floatv d = st.rt * (wv[j] * act_loadv(dyr, j) - xhat * sgx);
        if (dresr != 0)
            d += act_loadv(dresr, j);
        act_storev(dhr, j, d);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
add_rms_norm_backward_rows(const __global act_t *h, const __global float *w,
                           const __global act_t *dy, const __global act_t *dres,
                           __global act_t *dh, int rows, int cols, float eps)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = live ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *wv = (const __global floatv *)w;

    const rms_row st = rms_row_stats(h + off, n, cols, eps, red, slot, t);
    const float sgx = rms_row_sgx(h + off, dy + off, wv, n, cols, st, red, slot, t);
    rms_row_apply(h + off, wv, dy + off, dres != 0 ? dres + off : 0, dh + off, n, st, sgx, t);
}

/* Each row's statistics into stats[4 * row ..]: rs, rt, e, mean(g * xhat). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
add_rms_norm_backward_stats(const __global act_t *h, const __global float *w,
                            const __global act_t *dy, __global float *stats, int rows, int cols,
                            float eps)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = live ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *wv = (const __global floatv *)w;

    const rms_row st = rms_row_stats(h + off, n, cols, eps, red, slot, t);
    const float sgx = rms_row_sgx(h + off, dy + off, wv, n, cols, st, red, slot, t);
    if (live && t == 0) {
        __global float *s = stats + 4 * (size_t)row;
        s[0] = st.rs;
        s[1] = st.rt;
        s[2] = (float)st.e;
        s[3] = sgx;
    }
}

/* dh from the rows' statistics (add_rms_norm_backward_stats). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
add_rms_norm_backward_apply(const __global act_t *h, const __global float *w,
                            const __global act_t *dy, const __global act_t *dres,
                            const __global float *stats, __global act_t *dh, int rows, int cols)
{
    AFTER_PREVIOUS_LAUNCH();
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    if (row >= rows)
        return;
    const size_t off = (size_t)row * (size_t)cols;
    const __global float *s = stats + 4 * (size_t)row;
    rms_row st;
    st.rs = s[0];
    st.rt = s[1];
    st.e = (int)s[2];
    st.f = pow2(-st.e);
    rms_row_apply(h + off, (const __global floatv *)w, dy + off, dres != 0 ? dres + off : 0,
                  dh + off, cols / VEC, st, s[3], t);
}

/* Work-item (j, c) of a span of `span` columns (j = id % span, c = id / span) sums dy * xhat
 * over rows c * chunk .. (c + 1) * chunk - 1 of column j, in row order, into part[c * cols + j].
 * Coalesced along the columns; h and dy read once more (8 bytes per element in fp32). */
__kernel void add_rms_norm_weight_partials(const __global act_t *h, const __global act_t *dy,
                                           const __global float *stats, __global float *part,
                                           int rows, int cols, int chunk, int chunks, int span)
{
    AFTER_PREVIOUS_LAUNCH();
    const int id = (int)get_global_id(0), j = id % span, c = id / span;
    if (j >= cols || c >= chunks)
        return;
    const int end = min(rows, (c + 1) * chunk);
    float g = 0.0f, gc = 0.0f;
    for (int i = c * chunk; i < end; i++) {
        const size_t at = (size_t)i * (size_t)cols + (size_t)j;
        const __global float *s = stats + 4 * (size_t)i;
        const float xhat = act_load(h, at) * pow2(-(int)s[2]) * s[0];
        comp_add(&g, &gc, act_load(dy, at) * xhat);
    }
    part[(size_t)c * (size_t)cols + (size_t)j] = g;
}

/* dw[j] = the sum of column j's `chunks` partials: a work-group of COMBINE_COLS x
 * COMBINE_SLICES work-items takes COMBINE_COLS columns, work-item (c, s) the partials s,
 * s + COMBINE_SLICES, ... of its column in order, and slice 0 adds the slices' sums in slice
 * order: the same result on every run. ceil(cols / COMBINE_COLS) work-groups. */
__kernel __attribute__((reqd_work_group_size(COMBINE_COLS * COMBINE_SLICES, 1, 1))) void
add_rms_norm_weight_combine(const __global float *part, __global float *dw, int cols, int chunks)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float sums[COMBINE_SLICES][COMBINE_COLS];
    const int lid = (int)get_local_id(0), c = lid % COMBINE_COLS, sl = lid / COMBINE_COLS;
    const int j = (int)get_group_id(0) * COMBINE_COLS + c;
    float g = 0.0f, gc = 0.0f;
    if (j < cols)
        for (int k = sl; k < chunks; k += COMBINE_SLICES)
            comp_add(&g, &gc, part[(size_t)k * (size_t)cols + (size_t)j]);
    sums[sl][c] = g;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (sl != 0 || j >= cols)
        return;
    g = gc = 0.0f;
    for (int k = 0; k < COMBINE_SLICES; k++)
        comp_add(&g, &gc, sums[k][c]);
    dw[j] = g;
}

#if CACHE > 0
#define SLOT_SPAN (T * CACHE) /* vectors a slot holds: at least a row */

/* Vector-wise compensated sum (comp_add on each lane). */
inline void comp_addv(floatv *sum, floatv *comp, floatv v)
{
    const floatv y = v - *comp, s = *sum + y;
    *comp = select((floatv)(0.0f), (s - *sum) - y, isfinite(s));
    *sum = s;
}

/* Row `row` of h, dy and dres (NULL: none) into this work-item's hv, dv and rv where
 * row < end, zeros otherwise. */
inline void load_rows(floatv *hv, floatv *dv, floatv *rv, const __global act_t *h,
                      const __global act_t *dy, const __global act_t *dres, int row, int end,
                      int cols, int n, int t)
{
    const bool live = row < end;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
#pragma unroll
    for (int i = 0; i < CACHE; i++) {
        const int j = t + i * T;
        hv[i] = live && j < n ? act_loadv(h + off, j) : (floatv)(0.0f);
        dv[i] = live && j < n ? act_loadv(dy + off, j) : (floatv)(0.0f);
        rv[i] = dres != 0 && live && j < n ? act_loadv(dres + off, j) : (floatv)(0.0f);
    }
}

/* This work-item's part of (sum h^2, sum g * h) of a row held in hv, dv (wr: w); zeros past the
 * row add nothing. */
inline float4 row_sums(const floatv *hv, const floatv *wr, const floatv *dv)
{
    float4 s = (float4)(0.0f);
#pragma unroll
    for (int i = 0; i < CACHE; i++) {
        s.x += HSUM(hv[i] * hv[i]);
        s.y += HSUM(wr[i] * dv[i] * hv[i]);
    }
    return s;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
add_rms_norm_backward_fused(const __global act_t *h, const __global float *w,
                            const __global act_t *dy, const __global act_t *dres,
                            __global act_t *dh, __global float *part, int rows, int cols,
                            float eps, int chunk)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float4 red[WG];
#if ROWS > 1
    __local floatv sums[ROWS - 1][SLOT_SPAN];
#endif
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int g = (int)get_group_id(0);
    const int n = cols / VEC;
    floatv wr[CACHE], pg[CACHE], pgc[CACHE];
    slot_load(wr, CACHE, (const __global floatv *)w, true, n, t, (floatv)(0.0f));
#pragma unroll
    for (int i = 0; i < CACHE; i++)
        pg[i] = pgc[i] = (floatv)(0.0f);
    /* least: where a row's mean square and eps together come below 2^-60, its squares may have
     * lost digits to the subnormals (an eps of 2^-60 or more hides them: least 0) */
    const float inv_n = 1.0f / (float)cols, least = (float)cols * fmax(0.0f, 0x1p-60f - eps);
    const int begin = g * chunk, end = min(rows, begin + chunk);
    const int steps = (end - begin + ROWS - 1) / ROWS;
    floatv hv[CACHE], dv[CACHE], rv[CACHE];
#if PREFETCH
    floatv hn[CACHE], dn[CACHE], rn[CACHE];
    load_rows(hn, dn, rn, h, dy, dres, begin + slot, end, cols, n, t);
#endif
    for (int step = 0; step < steps; step++) {
        const int row = begin + step * ROWS + slot;
        const bool live = row < end;
        const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
#if PREFETCH
#pragma unroll
        for (int i = 0; i < CACHE; i++) {
            hv[i] = hn[i];
            dv[i] = dn[i];
            rv[i] = rn[i];
        }
        if (step + 1 < steps)
            load_rows(hn, dn, rn, h, dy, dres, row + ROWS, end, cols, n, t);
#else
        load_rows(hv, dv, rv, h, dy, dres, row, end, cols, n, t);
#endif
        /* the row's sums unscaled; where a row of the work-group (whose trees share barriers)
         * summed out of range (squares that overflowed or fell among the subnormals against an
         * eps too small to hide them), the whole work-group sums again over its rows scaled by
         * 2^-e: only rows of extreme magnitude pay the two more trees */
        bool out_of_range;
        float4 s = slot_sum4_checked(row_sums(hv, wr, dv), red, slot, t, least, &out_of_range);
        float2 rr;
        if (!out_of_range) {
            rr.x = rr.y = 1.0f / sqrt(s.x * inv_n + eps);
        } else {
            const int e = scale_held_row(hv, CACHE, (__local float *)red, slot, t);
            s = slot_sum4(row_sums(hv, wr, dv), red, slot, t);
            rr = scaled_rstd(s.x * inv_n, eps, e);
        }
        const float sgx = s.y * rr.x * inv_n;
        if (live) {
#pragma unroll
            for (int i = 0; i < CACHE; i++) {
                const int j = t + i * T;
                if (j < n) {
                    const floatv xhat = hv[i] * rr.x;
                    floatv d = rr.y * (wr[i] * dv[i] - xhat * sgx);
                    if (dres != 0)
                        d += rv[i];
                    act_storev(dh + off, j, d);
                    if (part != 0)
                        comp_addv(&pg[i], &pgc[i], dv[i] * xhat);
                }
            }
        }
    }
#if ROWS > 1
    /* the slots' sums added in slot order: slot s > 0 leaves its sums in local memory, slot 0
     * adds them (also without part: every work-item reaches the barrier) */
    if (slot > 0)
#pragma unroll
        for (int i = 0; i < CACHE; i++)
            sums[slot - 1][t + i * T] = pg[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slot > 0)
        return;
    for (int s = 0; s < ROWS - 1; s++)
#pragma unroll
        for (int i = 0; i < CACHE; i++)
            comp_addv(&pg[i], &pgc[i], sums[s][t + i * T]);
#endif
    if (part == 0)
        return;
    __global floatv *pgv = (__global floatv *)(part + (size_t)g * (size_t)cols);
#pragma unroll
    for (int i = 0; i < CACHE; i++) {
        const int j = t + i * T;
        if (j < n)
            pgv[j] = pg[i];
    }
}
#endif
