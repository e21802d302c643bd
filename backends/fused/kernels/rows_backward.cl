/*
 * The backward passes of softmax, layer norm and RMS norm.
 *
 * Layout: x (softmax: its output y), dy and dx rows x cols, row-major, dx may be dy; gamma (the
 * norms' weight), dgamma and dbeta 1 x cols; stats 4 x rows floats (per row, of the row scaled
 * by 2^-e: the mean as mean + mean_lo, the factor 1/std in the scaled row's units, and e).
 * Any magnitude, as the forward kernels: a row is scaled by 2^-e, e from its largest
 * magnitude (scale_exponent, common.cl), before its sums and squares, so that rows of 1e20,
 * 1e37 or 1e-30 with eps = 0 neither overflow nor underflow (scaled_rstd); xhat is the same
 * in the scaled row, and dx takes the true 1/std. The single pass sums unscaled and scales
 * only where a row of its work-group is out of range (norm_backward_fused); the others scale
 * every row.
 * With VEC = 4, cols % 4 == 0 and the buffers start 16-byte aligned.
 *
 * softmax_backward_rows, norm_backward_rows: dx in one pass per row (softmax_backward_cached:
 * the row held in registers where it fits, so y and dy are read once). Work decomposition as the
 * forward row kernels (common.cl): a slot of T = WG / ROWS work-items per row, ROWS rows per
 * work-group. softmax: dot = sum y*dy (one slot reduction), dx = y * (dy - dot): y and dy
 * read twice (the second time mostly from cache), dx written once. norms: the statistics
 * (layer norm: mean, then the deviations; RMS norm: the squares), then sum g and sum g*xhat
 * with g = gamma*dy, then dx = r * (g - mean(g) - xhat * mean(g*xhat)): x read three times,
 * dy twice, gamma twice (cached), dx written once.
 *
 * The weight gradients with dx in one pass, where a row fits in a work-group's registers
 * (norm_backward_fused below, then norm_weight_combine); else, deterministic and without
 * atomics, in three small launches before dx (so that dx may overwrite dy): norm_stats_rows
 * writes each row's mean and 1/std to stats
 * (decomposed as above); norm_weight_partials gives one work-item to each (column, chunk of
 * rows), which sums dy*xhat and dy over its rows in row order into partials (x and dy read
 * once more, 8 bytes per element, coalesced along the columns); norm_weight_combine adds a
 * column's partials in a fixed order (slices of chunks, then the slices). Compensated (Kahan)
 * float sums throughout; each column's result is the same on every run.
 *
 * Tuning parameters: WG, ROWS, VEC, CACHE (common.cl). center: 1 for layer norm, 0 for RMS
 * norm.
 */

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
softmax_backward_rows(const __global float *y, const __global float *dy, __global float *dx,
                      int rows, int cols)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = live ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *yr = (const __global floatv *)(y + off);
    const __global floatv *dyr = (const __global floatv *)(dy + off);
    __global floatv *dxr = (__global floatv *)(dx + off);

    float dot = 0.0f;
    for (int j = t; j < n; j += T)
        dot += HSUM(yr[j] * dyr[j]);
    dot = slot_sum(dot, red, slot, t);
    for (int j = t; j < n; j += T)
        dxr[j] = yr[j] * (dyr[j] - dot);
}

/* A row's statistics, of the row scaled by 2^-e (f = 2^-e): its mean as mean + mean_lo (0
 * without center: common.cl's pair sum, so that a mean far from zero keeps the digits of the
 * deviations), and 1/sqrt(var + eps) in the scaled row's units (rs) and true (rt). */
typedef struct row_stats {
    float mean, mean_lo, rs, rt, f;
    int e;
} row_stats;

/* x's row statistics; every work-item of the group calls it (center is the same for all). red:
 * WG float4. */
inline row_stats norm_row_stats(const __global floatv *xr, int n, int cols, float eps, int center,
                                __local float4 *red, int slot, int t)
{
    row_stats st;
    float m = 0.0f;
    for (int j = t; j < n; j += T)
        m = fmax(m, HMAX(fabs(xr[j])));
    st.e = scale_exponent(slot_max(m, (__local float *)red, slot, t));
    st.f = pow2(-st.e);
    const floatv f = (floatv)(st.f);
    st.mean = st.mean_lo = 0.0f;
    if (center) {
        float hi = 0.0f, lo = 0.0f;
        for (int j = t; j < n; j += T)
            sum2_add(&hi, &lo, xr[j] * f);
        const float4 s = slot_pair_sum4((float4)(hi, lo, 0.0f, 0.0f), red, slot, t);
        st.mean = mean2(s.x, s.y, (float)cols, 1.0f / (float)cols, &st.mean_lo);
    }
    float sq = 0.0f;
    for (int j = t; j < n; j += T) {
        const floatv d = (xr[j] * f - (floatv)(st.mean)) - (floatv)(st.mean_lo);
        sq += HSUM(d * d);
    }
    sq = slot_sum4((float4)(sq, 0.0f, 0.0f, 0.0f), red, slot, t).x;
    const float2 r = scaled_rstd(sq / (float)cols, eps, st.e);
    st.rs = r.x;
    st.rt = r.y;
    return st;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
norm_backward_rows(const __global float *x, const __global float *gamma, const __global float *dy,
                   __global float *dx, int rows, int cols, float eps, int center)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float4 red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = live ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const __global floatv *xr = (const __global floatv *)(x + off);
    const __global floatv *gv = (const __global floatv *)gamma;
    const __global floatv *dyr = (const __global floatv *)(dy + off);
    __global floatv *dxr = (__global floatv *)(dx + off);

    const row_stats st = norm_row_stats(xr, n, cols, eps, center, red, slot, t);
    const floatv mean = (floatv)(st.mean), mean_lo = (floatv)(st.mean_lo), f = (floatv)(st.f);
    float4 s = (float4)(0.0f);
    for (int j = t; j < n; j += T) {
        const floatv g = gv[j] * dyr[j];
        s.x += HSUM(g);
        s.y += HSUM(g * ((xr[j] * f - mean) - mean_lo));
    }
    s = slot_sum4(s, red, slot, t);
    const float sg = center ? s.x / (float)cols : 0.0f, sgx = s.y * st.rs / (float)cols;
    for (int j = t; j < n; j += T) {
        const floatv xhat = ((xr[j] * f - mean) - mean_lo) * st.rs;
        dxr[j] = st.rt * (gv[j] * dyr[j] - sg - xhat * sgx);
    }
}

/* Each row's (mean, mean_lo, rs, e) of norm_row_stats into stats[4 * row ..]. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
norm_stats_rows(const __global float *x, __global float *stats, int rows, int cols, float eps,
                int center)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float4 red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = live ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    const row_stats st =
        norm_row_stats((const __global floatv *)(x + off), n, cols, eps, center, red, slot, t);
    if (live && t == 0) {
        stats[4 * row] = st.mean;
        stats[4 * row + 1] = st.mean_lo;
        stats[4 * row + 2] = st.rs;
        stats[4 * row + 3] = (float)st.e;
    }
}

/* Compensated float sum: *sum += v, *comp carrying what the adds lost. An infinite sum
 * carries nothing: (t - sum) - y would be inf - inf = NaN and turn an infinite gradient into
 * NaN. */
inline void kahan_add(float *sum, float *comp, float v)
{
    const float y = v - *comp, t = *sum + y;
    *comp = isfinite(t) ? (t - *sum) - y : 0.0f;
    *sum = t;
}

/* Work-item (j, c) of a span of `span` columns (j = id % span, c = id / span) sums dy*xhat
 * and dy over rows c*chunk .. (c+1)*chunk - 1 of column j, in row order, into the partials
 * part[c*cols + j] (dgamma's) and part[(chunks + c)*cols + j] (dbeta's). */
__kernel void norm_weight_partials(const __global float *x, const __global float *dy,
                                   const __global float *stats, __global float *part, int rows,
                                   int cols, int chunk, int chunks, int span)
{
    AFTER_PREVIOUS_LAUNCH();
    const int id = (int)get_global_id(0), j = id % span, c = id / span;
    if (j >= cols || c >= chunks)
        return;
    const int end = min(rows, (c + 1) * chunk);
    float g = 0.0f, gc = 0.0f, b = 0.0f, bc = 0.0f;
    for (int i = c * chunk; i < end; i++) {
        const size_t at = (size_t)i * (size_t)cols + (size_t)j;
        const float d = dy[at];
        const float f = pow2(-(int)stats[4 * i + 3]);
        const float xhat = ((x[at] * f - stats[4 * i]) - stats[4 * i + 1]) * stats[4 * i + 2];
        kahan_add(&g, &gc, d * xhat);
        kahan_add(&b, &bc, d);
    }
    part[(size_t)c * (size_t)cols + (size_t)j] = g;
    part[(size_t)(chunks + c) * (size_t)cols + (size_t)j] = b;
}

/* The chunks' partials of each column added: a work-group of COMBINE_COLS x COMBINE_SLICES
 * work-items takes COMBINE_COLS columns, work-item (c, s) the chunks s, s + COMBINE_SLICES, ...
 * of its column in order, and slice 0 adds the slices' sums in slice order: the same result on
 * every run, with COMBINE_SLICES times the work-items of one per column (a column's chunks can
 * number hundreds). dgamma or dbeta may be NULL (not wanted). */
#define COMBINE_COLS 32
#define COMBINE_SLICES 8
__kernel __attribute__((reqd_work_group_size(COMBINE_COLS * COMBINE_SLICES, 1, 1))) void
norm_weight_combine(const __global float *part, __global float *dgamma, __global float *dbeta,
                    int cols, int chunks)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float sums[2][COMBINE_SLICES][COMBINE_COLS];
    const int lid = (int)get_local_id(0), c = lid % COMBINE_COLS, sl = lid / COMBINE_COLS;
    const int j = (int)get_group_id(0) * COMBINE_COLS + c;
    float g = 0.0f, gc = 0.0f, b = 0.0f, bc = 0.0f;
    if (j < cols) {
        for (int k = sl; k < chunks; k += COMBINE_SLICES) {
            kahan_add(&g, &gc, part[(size_t)k * (size_t)cols + (size_t)j]);
            kahan_add(&b, &bc, part[(size_t)(chunks + k) * (size_t)cols + (size_t)j]);
        }
    }
    sums[0][sl][c] = g;
    sums[1][sl][c] = b;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (sl != 0 || j >= cols)
        return;
    g = gc = b = bc = 0.0f;
    for (int k = 0; k < COMBINE_SLICES; k++) {
        kahan_add(&g, &gc, sums[0][k][c]);
        kahan_add(&b, &bc, sums[1][k][c]);
    }
    if (dgamma != 0)
        dgamma[j] = g;
    if (dbeta != 0)
        dbeta[j] = b;
}

#if defined(CACHE) && CACHE > 0
/* softmax_backward_rows with the row of y and dy held in registers (CACHE vectors per
 * work-item, rows of at most T * VEC * CACHE elements): each read once. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
softmax_backward_cached(const __global float *y, const __global float *dy, __global float *dx,
                        int rows, int cols)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int n = cols / VEC;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    floatv yv[CACHE], dv[CACHE];
    slot_load(yv, CACHE, (const __global floatv *)(y + off), live, n, t, (floatv)(0.0f));
    slot_load(dv, CACHE, (const __global floatv *)(dy + off), live, n, t, (floatv)(0.0f));
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < CACHE; i++)
        dot += HSUM(yv[i] * dv[i]); /* zeros past the row */
    dot = slot_sum(dot, red, slot, t);
    __global floatv *dxr = (__global floatv *)(dx + off);
    if (live) {
#pragma unroll
        for (int i = 0; i < CACHE; i++) {
            const int j = t + i * T;
            if (j < n)
                dxr[j] = yv[i] * (dv[i] - (floatv)(dot));
        }
    }
}

/* kahan_add on each lane of a vector. */
inline void kahan_addv(floatv *sum, floatv *comp, floatv v)
{
    const floatv y = v - *comp, t = *sum + y;
    *comp = select((floatv)(0.0f), (t - *sum) - y, isfinite(t));
    *sum = t;
}

/* A norm's dx and its weight gradients' partial sums in one pass over x and dy, where a row
 * fits in a slot's registers (CACHE vectors per work-item: j = t, t + T, ... of the row).
 * Work-group g takes rows g * chunk .. (g + 1) * chunk - 1, ROWS at a time (slot s the rows
 * s, s + ROWS, ... of its chunk). With PREFETCH a slot's next row is loaded before the current
 * one is reduced, so that the loads stay in flight through the reductions' barriers (nearer
 * the copy bandwidth with it than without: commit 6be2a11). Per row two trees for layer norm
 * (sum x and sum g; the squared deviations and sum g * (x - mean)), one for RMS norm, then dx,
 * and the compensated sums of dy*xhat and dy per column over the slot's rows. At the end the
 * slots' sums are added in slot order through local memory and written as the group's
 * partials part[g * cols + j] (dgamma's) and part[(groups + g) * cols + j] (dbeta's), which
 * norm_weight_combine adds. x and dy read once, dx written once (dx may be dy: a row is read
 * whole before it is written); the partials are 2 * groups * cols floats. */
#ifndef PREFETCH
#define PREFETCH 0
#endif
#define SLOT_SPAN (T * CACHE) /* vectors a slot holds: at least a row */

/* Row `row` of x and dy into this work-item's xv and dv where row < end, zeros otherwise. */
inline void load_row(floatv *xv, floatv *dv, const __global float *x, const __global float *dy,
                     int row, int end, int cols, int n, int t)
{
    const bool live = row < end;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
    slot_load(xv, CACHE, (const __global floatv *)(x + off), live, n, t, (floatv)(0.0f));
    slot_load(dv, CACHE, (const __global floatv *)(dy + off), live, n, t, (floatv)(0.0f));
}
/* This work-item's parts of a row's sums (xv its part of x, gam of gamma, dv of dy): layer
 * norm's first tree, (sum x as a pair hi, lo; sum g; 0), and the second, (the squared
 * deviations from mean + mean_lo; sum g * (x - mean); 0; 0), which for RMS norm (mean = 0) is
 * (sum x^2; sum g * x; 0; 0). */
inline float4 row_sums1(const floatv *xv, const floatv *gam, const floatv *dv, int t)
{
    float hi = 0.0f, lo = 0.0f, gs = 0.0f;
#pragma unroll
    for (int i = 0; i < CACHE; i++) {
        sum2_add(&hi, &lo, xv[i]);
        gs += HSUM(gam[i] * dv[i]);
    }
    return (float4)(hi, lo, gs, 0.0f);
}

inline float4 row_sums2(const floatv *xv, const floatv *gam, const floatv *dv, float mean,
                        float mean_lo, int n, int t)
{
    float4 s = (float4)(0.0f);
#pragma unroll
    for (int i = 0; i < CACHE; i++)
        if (t + i * T < n) {
            const floatv d = (xv[i] - (floatv)(mean)) - (floatv)(mean_lo);
            s.x += HSUM(d * d);
            s.y += HSUM(gam[i] * dv[i] * d);
        }
    return s;
}

/* row_sums2 of the single pass, with RMS norm's zero mean a constant the compiler folds */
#define ROW_SUMS2() \
    (center ? row_sums2(xv, gam, dv, mean, mean_lo, n, t) : row_sums2(xv, gam, dv, 0.0f, 0.0f, n, t))

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
norm_backward_fused(const __global float *x, const __global float *gamma,
                    const __global float *dy, __global float *dx, __global float *part, int rows,
                    int cols, float eps, int center, int chunk, int groups)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float4 red[WG];
#if ROWS > 1
    __local floatv sums[ROWS - 1][SLOT_SPAN];
#endif
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int g = (int)get_group_id(0);
    const int n = cols / VEC;
    floatv gam[CACHE], pg[CACHE], pgc[CACHE], pb[CACHE], pbc[CACHE];
    slot_load(gam, CACHE, (const __global floatv *)gamma, true, n, t, (floatv)(0.0f));
#pragma unroll
    for (int i = 0; i < CACHE; i++)
        pg[i] = pgc[i] = pb[i] = pbc[i] = (floatv)(0.0f);
    /* least: where a row's mean square and eps together come below 2^-60, its squares may
     * have lost digits to the subnormals (an eps of 2^-60 or more hides them: least 0) */
    const float inv_n = 1.0f / (float)cols, least = (float)cols * fmax(0.0f, 0x1p-60f - eps);
    const int begin = g * chunk, end = min(rows, begin + chunk);
    const int steps = (end - begin + ROWS - 1) / ROWS;
    floatv xv[CACHE], dv[CACHE];
#if PREFETCH
    floatv xn[CACHE], dn[CACHE];
    load_row(xn, dn, x, dy, begin + slot, end, cols, n, t);
#endif
    for (int step = 0; step < steps; step++) {
        const int row = begin + step * ROWS + slot;
        const bool live = row < end;
        const size_t off = (size_t)(live ? row : 0) * (size_t)cols;
#if PREFETCH
#pragma unroll
        for (int i = 0; i < CACHE; i++) {
            xv[i] = xn[i];
            dv[i] = dn[i];
        }
        if (step + 1 < steps)
            load_row(xn, dn, x, dy, row + ROWS, end, cols, n, t);
#else
        load_row(xv, dv, x, dy, row, end, cols, n, t);
#endif
        /* the row's statistics and sums of g = gamma * dy, unscaled: layer norm in two trees
         * (sum x as a pair, for the mean as mean + mean_lo, and sum g; then the squared
         * deviations and sum g * (x - mean)), RMS norm in one (sum x^2 and sum g * x); zeros
         * past the row. Where the last tree says that a row of the work-group (whose trees
         * share barriers) summed out of range (slot_sum4_checked: squares that overflowed or
         * fell among the subnormals, against an eps too small to hide them), the whole
         * work-group sums again of its rows scaled by 2^-e, e from each row's largest
         * magnitude: rows of 1e20 or of 1e-30 with eps = 0 alone pay the trees this takes. */
        float mean = 0.0f, mean_lo = 0.0f, sg = 0.0f;
        if (center) {
            const float4 s1 = slot_pair_sum4(row_sums1(xv, gam, dv, t), red, slot, t);
            mean = mean2(s1.x, s1.y, (float)cols, inv_n, &mean_lo);
            sg = s1.z * inv_n;
        }
        bool out_of_range;
        float4 s2 = slot_sum4_checked(ROW_SUMS2(), red, slot, t, least, &out_of_range);
        float2 r;
        if (!out_of_range) {
            r.x = r.y = 1.0f / sqrt(s2.x * inv_n + eps);
        } else {
            const int e = scale_held_row(xv, CACHE, (__local float *)red, slot, t);
            if (center) {
                const float4 s1 = slot_pair_sum4(row_sums1(xv, gam, dv, t), red, slot, t);
                mean = mean2(s1.x, s1.y, (float)cols, inv_n, &mean_lo);
            }
            s2 = slot_sum4(ROW_SUMS2(), red, slot, t);
            r = scaled_rstd(s2.x * inv_n, eps, e);
        }
        const float sgx = s2.y * r.x * inv_n;
        if (live) {
            __global floatv *dxr = (__global floatv *)(dx + off);
#pragma unroll
            for (int i = 0; i < CACHE; i++) {
                const int j = t + i * T;
                if (j < n) {
                    const floatv xhat = ((xv[i] - (floatv)(mean)) - (floatv)(mean_lo)) * r.x;
                    dxr[j] = r.y * (gam[i] * dv[i] - sg - xhat * sgx);
                    kahan_addv(&pg[i], &pgc[i], dv[i] * xhat);
                    kahan_addv(&pb[i], &pbc[i], dv[i]);
                }
            }
        }
    }
#if ROWS > 1
    /* the slots' sums added in slot order: slot s > 0 leaves its sums in local memory, slot 0
     * adds them (dgamma's, then dbeta's, through the same space) */
    for (int which = 0; which < 2; which++) {
        if (slot > 0)
#pragma unroll
            for (int i = 0; i < CACHE; i++)
                sums[slot - 1][t + i * T] = which == 0 ? pg[i] : pb[i];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (slot == 0)
            for (int s = 0; s < ROWS - 1; s++)
#pragma unroll
                for (int i = 0; i < CACHE; i++) {
                    if (which == 0)
                        kahan_addv(&pg[i], &pgc[i], sums[s][t + i * T]);
                    else
                        kahan_addv(&pb[i], &pbc[i], sums[s][t + i * T]);
                }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (slot > 0)
        return;
#endif
    __global floatv *pgv = (__global floatv *)(part + (size_t)g * (size_t)cols);
    __global floatv *pbv = (__global floatv *)(part + (size_t)(groups + g) * (size_t)cols);
#pragma unroll
    for (int i = 0; i < CACHE; i++) {
        const int j = t + i * T;
        if (j < n) {
            pgv[j] = pg[i];
            pbv[j] = pb[i];
        }
    }
}
#endif
