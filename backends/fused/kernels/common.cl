/*
 * Shared prelude of every fused kernel (the host puts it in front of each kernel file).
 *
 * What: the vector type selected by VEC, its horizontal sum and maximum, and, over one "row
 * slot", the load of a row into registers and work-group reductions: a work-group of WG
 * work-items is split into ROWS slots of T = WG / ROWS consecutive work-items, each slot
 * serving one row (or one column strip).
 * Reductions go through local memory, one tree per slot that adds up to 8 values per step
 * (log8(T) barriers: the barriers, not the adds, are what a reduction costs next to the row's
 * memory traffic); every work-item of the group must call them, also those whose row lies
 * beyond the matrix. A step writes only slots below its width nw, each read there by its writer
 * alone, so a step needs no barrier inside it.
 *
 * For the norms at any magnitude: a row is scaled by a power of two taken from its largest
 * magnitude (exact, so that squares neither overflow nor underflow), and its sum is kept as an
 * unevaluated pair hi + lo (TwoSum), so that a mean far from zero (1e4 with sigma 0.02) keeps
 * the digits a single float would round away.
 *
 * Tuning parameters (set by the host with -D; defaults here):
 *   WG    work-items per work-group (a power of two)
 *   ROWS  rows (slots) per work-group (a power of two dividing WG)
 *   VEC   elements per load: 4 (float4) when the row length allows it, else 1
 */
#ifndef WG
#define WG 256
#endif
#ifndef ROWS
#define ROWS 1
#endif
#ifndef VEC
#define VEC 4
#endif

#define T (WG / ROWS)

#if VEC == 4
typedef float4 floatv;
#define HSUM(v) (((v).x + (v).y) + ((v).z + (v).w))
#define HMAX(v) fmax(fmax((v).x, (v).y), fmax((v).z, (v).w))
#elif VEC == 1
typedef float floatv;
#define HSUM(v) (v)
#define HMAX(v) (v)
#else
#error "VEC must be 1 or 4"
#endif

/* Loads the count vectors t, t + T, t + 2T, ... of a row into v, fill where the row has none
 * (past its n vectors, or every one when the row is beyond the matrix: !live). The row kernels
 * hold a row, and its weights, in registers this way; called with a constant count, the loop
 * unrolls and every load is issued before the first one is used. */
inline void slot_load(floatv *v, int count, const __global floatv *row, bool live, int n, int t,
                      floatv fill)
{
#pragma unroll
    for (int i = 0; i < count; i++) {
        const int j = t + i * T;
        v[i] = live && j < n ? row[j] : fill;
    }
}

/* Defines TYPE NAME(TYPE v, __local TYPE *red, int slot, int t): v combined over the T
 * work-items of slot `slot` (t: the work-item's index in its slot; red: WG values of TYPE),
 * every work-item getting the result. One tree for every slot reduction: each step folds up to
 * 8 values with COMBINE(acc, value) into the first nw, in a fixed order, and ends with a
 * barrier, until r[0] holds the slot's. */
#define SLOT_REDUCTION(NAME, TYPE, COMBINE) \
    inline TYPE NAME(TYPE v, __local TYPE *red, int slot, int t) \
    { \
        SLOT_TREE(TYPE, COMBINE) \
        TYPE out = r[0]; \
        barrier(CLK_LOCAL_MEM_FENCE); \
        return out; \
    }
/* The tree of a slot reduction, leaving the slot's result in r[0]. */
#define SLOT_TREE(TYPE, COMBINE) \
    __local TYPE *r = red + slot * T; \
    r[t] = v; \
    barrier(CLK_LOCAL_MEM_FENCE); \
    for (int w = T; w > 1;) { \
        const int nw = w >= 8 ? w / 8 : 1, fan = w / nw; \
        if (t < nw) { \
            TYPE acc = r[t]; \
            for (int f = 1; f < fan; f++) \
                acc = COMBINE(acc, r[t + f * nw]); \
            r[t] = acc; \
        } \
        barrier(CLK_LOCAL_MEM_FENCE); \
        w = nw; \
    }
#define SLOT_ADD(a, b) ((a) + (b))

/* slot_sum: the sum of v over the slot. slot_sum4: up to four sums at once, v's lanes, in one
 * tree (red holds WG float4). slot_max: the maximum; fmax ignores NaN, so a NaN row is caught
 * by the later sums instead. */
SLOT_REDUCTION(slot_sum, float, SLOT_ADD)
SLOT_REDUCTION(slot_sum4, float4, SLOT_ADD)
SLOT_REDUCTION(slot_max, float, fmax)

/* The exponent e of the power of two 2^-e that scales values of magnitude up to m into
 * [0, 4): ilogb(m), clamped so that 2^-e and 2^e are normal floats (a zero, subnormal, NaN or
 * infinite m gives a bound, not a trap). Scaling by pow2(-e) is exact. */
inline int scale_exponent(float m)
{
    return clamp(ilogb(m), -126, 126);
}

/* 2^k for -126 <= k <= 127, built from its exponent bits (ldexp is a slow library call on
 * some devices, NVIDIA's among them). */
inline float pow2(int k)
{
    return as_float((k + 127) << 23);
}

/* Scales the count vectors v that a work-item holds of its slot's row by 2^-e, e from the
 * row's largest magnitude (scale_exponent), and returns e; every work-item of the group calls
 * it. red: WG floats. */
inline int scale_held_row(floatv *v, int count, __local float *red, int slot, int t)
{
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < count; i++)
        m = fmax(m, HMAX(fabs(v[i])));
    const int e = scale_exponent(slot_max(m, red, slot, t));
    const floatv f = (floatv)(pow2(-e));
#pragma unroll
    for (int i = 0; i < count; i++)
        v[i] *= f;
    return e;
}

/* 1/sqrt(var + eps) of a row scaled by 2^-e (mean_sq_s: the scaled row's variance or mean
 * square), as .x in the scaled row's units (x * 2^-e times .x is x times the true factor) and
 * .y, the true factor. Where eps * 2^-2e overflows (rows far below sqrt(eps)), var is nothing
 * against eps: .y = 1/sqrt(eps). Where the sum is zero, every scaled deviation is zero (a
 * constant row, eps lost in the scaling): any finite .x keeps them zero, FLT_MAX with eps > 0,
 * where .y = 1/sqrt(eps); with eps = 0 both are 1/0 = inf, and 0 * inf gives NaN as 0/0 does. */
inline float2 scaled_rstd(float mean_sq_s, float eps, int e)
{
    const float down = pow2(-e), es = eps * down * down, den = mean_sq_s + es;
    if (isinf(es)) {
        const float r = 1.0f / sqrt(eps);
        return (float2)(r * pow2(e), r);
    }
    if (den == 0.0f && eps > 0.0f)
        return (float2)(FLT_MAX, 1.0f / sqrt(eps));
    const float r = 1.0f / sqrt(den);
    return (float2)(r, r * down);
}

/* a + b = s + *err exactly, s the rounded sum (Knuth's TwoSum: no branch, any magnitudes). */
inline float two_sum(float a, float b, float *err)
{
    const float s = a + b, bb = s - a;
    *err = (a - (s - bb)) + (b - bb);
    return s;
}

/* *hi + *lo += v as an unevaluated pair (TwoSum); an infinite sum keeps no error term, which
 * would be NaN. */
inline void pair_add(float *hi, float *lo, float v)
{
    float e;
    const float s = two_sum(*hi, v, &e);
    *lo += isfinite(s) ? e : 0.0f;
    *hi = s;
}

/* The sum of x[0 .. count-1] by one work-group of WG work-items, in the same order every run:
 * work-item l adds l, l + WG, ... as a pair sum, then a binary tree of pair sums; the result
 * to every work-item. rh and rl hold WG floats each. x is read volatile, so that the last
 * work-group of a launch may sum what the others wrote. */
inline float group_pair_sum(const volatile __global float *x, int count, __local float *rh,
                            __local float *rl)
{
    const int l = (int)get_local_id(0);
    float hi = 0.0f, lo = 0.0f;
    for (int i = l; i < count; i += WG)
        pair_add(&hi, &lo, x[i]);
    rh[l] = hi;
    rl[l] = lo;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = WG / 2; w > 0; w /= 2) {
        if (l < w) {
            hi = rh[l];
            lo = rl[l] + rl[l + w];
            pair_add(&hi, &lo, rh[l + w]);
            rh[l] = hi;
            rl[l] = lo;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return rh[0] + rl[0];
}

/* Adds the elements of v to the pair (hi, lo). */
inline void sum2_add(float *hi, float *lo, floatv v)
{
    float e;
#if VEC == 4
    *hi = two_sum(*hi, v.x, &e);
    *lo += e;
    *hi = two_sum(*hi, v.y, &e);
    *lo += e;
    *hi = two_sum(*hi, v.z, &e);
    *lo += e;
    *hi = two_sum(*hi, v.w, &e);
    *lo += e;
#else
    *hi = two_sum(*hi, v, &e);
    *lo += e;
#endif
}

/* The pair sum (hi, lo) over the slot, as slot_sum; rh and rl hold WG floats each. */
inline void slot_sum2(float *hi, float *lo, __local float *rh, __local float *rl, int slot, int t)
{
    rh += slot * T;
    rl += slot * T;
    rh[t] = *hi;
    rl[t] = *lo;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = T; w > 1;) {
        const int nw = w >= 8 ? w / 8 : 1, fan = w / nw;
        if (t < nw) {
            float h = rh[t], l = rl[t], e;
            for (int f = 1; f < fan; f++) {
                h = two_sum(h, rh[t + f * nw], &e);
                l += rl[t + f * nw] + e;
            }
            rh[t] = h;
            rl[t] = l;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        w = nw;
    }
    *hi = rh[0];
    *lo = rl[0];
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* a + b, where .x + .y holds a sum as an unevaluated pair (TwoSum) and .z, .w plain sums. */
inline float4 pair_add4(float4 a, float4 b)
{
    float e;
    const float hi = two_sum(a.x, b.x, &e);
    return (float4)(hi, a.y + b.y + e, a.z + b.z, a.w + b.w);
}

/* slot_pair_sum4: as slot_sum4, v.x + v.y summed as a pair (slot_sum2's arithmetic), v.z and
 * v.w plainly. */
SLOT_REDUCTION(slot_pair_sum4, float4, pair_add4)

/* As slot_sum4, also saying in *out whether the sums of any slot of the work-group fall where
 * a row summed unscaled is not exact enough: .x, a sum of squares, not finite or below least
 * (squares in the subnormal range, against an eps too small to hide them), or .y not finite.
 * Read before the tree's last barrier, so that the answer costs none of its own; the same for
 * every work-item. */
inline float4 slot_sum4_checked(float4 v, __local float4 *red, int slot, int t, float least,
                                bool *out)
{
    SLOT_TREE(float4, SLOT_ADD)
    const float4 result = r[0];
    bool any = false;
    for (int s = 0; s < ROWS; s++) {
        const float4 b = red[s * T];
        any |= !(b.x <= FLT_MAX) || !(fabs(b.y) <= FLT_MAX) || b.x < least;
    }
    *out = any;
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}

/* (hi + lo) / n as mean + *mean_lo, inv being 1/n to within a few ulps: the remainder of the
 * division is exact through fma, so x - mean - mean_lo is the deviation from the mean to about
 * a float's precision of the deviation, not of the mean. The quotient hi * inv is corrected
 * once by its remainder, so that a row of one value gives that value and zero deviations
 * (multiplies in place of divisions: a division is a slow sequence on some devices, and
 * NVIDIA's is not correctly rounded either). */
inline float mean2(float hi, float lo, float n, float inv, float *mean_lo)
{
    const float q0 = hi * inv, q = q0 + (fma(-q0, n, hi) + lo) * inv;
    *mean_lo = (fma(-q, n, hi) + lo) * inv;
    return q;
}
