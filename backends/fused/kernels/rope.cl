/*
 * Rotary position embedding (RoPE), rotate-half convention (Llama, transformers'
 * apply_rotary_pos_emb), y = rope(x), y may be x (in place: an item loads every element it
 * rotates before it stores any, and no element is another item's). The program is elem.cl +
 * this file.
 *
 * For each row r (a token at position p = pos[r]), head h and i < d/2, with a = p * inv_freq[i]:
 *   x'[i]       = x[i] * cos a - x[i + d/2] * sin a
 *   x'[i + d/2] = x[i + d/2] * cos a + x[i] * sin a
 * where x is the head's d columns h*d .. h*d + d-1 of row r. inverse = 1 rotates by -a: the
 * backward pass, applied to the gradient (the rotation's transpose).
 *
 * Layout: x and y rows x (heads * d) activations (act_t, elem.cl), row-major, d even. pos: rows ints,
 * each row's position (host-built: position_offset plus the row's index within its packed
 * sequence; 0 <= p < 2^24, where a float holds p exactly). inv_freq: with FREQ_PAIRS = 1, d/2
 * float pairs (hi, lo), the frequency as the unevaluated sum hi + lo (the host computes
 * theta^(-2i/d) in double and splits it); with FREQ_PAIRS = 0, d/2 floats (a caller's table,
 * its lo taken as 0).
 *
 * Angles: a float product p * inv_freq is off by up to half an ulp of a (0.004 rad at 1e5), so
 * a is kept as h + l: h = p * hi rounded, l = fma(p, hi, -h) + p * lo (the product's rounding
 * error, recovered exactly, and the low part), |l| below 0.01 up to p = 2^17 with hi <= 1;
 * then cos a = cos h * (1 - l^2/2) - sin h * l and sin a = sin h * (1 - l^2/2) + cos h * l
 * (the terms in l^3 are below 2e-7 there; first order alone leaves l^2/2, up to 3e-5). cos and
 * sin of h come from the full-precision built-in sincos, which reduces a large argument exactly
 * (once for both): never build with -cl-fast-relaxed-math or -cl-unsafe-math-optimizations,
 * whose approximations are off by far more at large arguments. What remains against the double
 * reference, on |x| <= 1 up to p = 2^17: the built-ins' few ulps, the l^3 terms and the
 * outputs' rounding, inside 2e-6.
 *
 * Work decomposition: one item per (row, group of HEADS_PER_ITEM heads, i < d/2); items are
 * numbered i fastest, then the head group, then the row, so that neighbouring work-items read
 * neighbouring columns. An item computes its angle once and rotates the pairs (i, i + d/2) of
 * its heads: all their loads first, then the stores. Grid-stride over the items: any global
 * size that is a multiple of WG (one item per work-item when it covers rows * groups * d/2,
 * groups = ceil(heads / HEADS_PER_ITEM)). Per element: x read and written once (8 bytes fp32,
 * 4 bf16), plus pos and inv_freq (read once per item, from cache). No local memory.
 *
 * Tuning parameters:
 *   WG              work-items per work-group
 *   HEADS_PER_ITEM  heads an item rotates with the one angle it computes
 *   FREQ_PAIRS      1: inv_freq holds (hi, lo) pairs; 0: plain floats
 */
#ifndef WG
#define WG 256 /* work-items per work-group */
#endif
#ifndef HEADS_PER_ITEM
#define HEADS_PER_ITEM 4 /* heads rotated by each item with one cos/sin */
#endif
#ifndef FREQ_PAIRS
#define FREQ_PAIRS 1 /* inv_freq: 1, (hi, lo) pairs; 0, plain floats */
#endif

/* (cos a, sin a) for a = p * (f.x + f.y), see the banner. */
inline float2 rope_cos_sin(int p, float2 f)
{
    const float pf = (float)p;
    const float h = pf * f.x;
    const float l = fma(pf, f.x, -h) + pf * f.y;
    float c;
    const float s = sincos(h, &c), keep = 1.0f - 0.5f * l * l; /* one argument reduction */
    return (float2)(c * keep - s * l, s * keep + c * l);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
rope(const __global act_t *x, __global act_t *y, const __global int *pos,
     const __global float *inv_freq, int rows, int heads, int d, int inverse)
{
    AFTER_PREVIOUS_LAUNCH();
    const int pairs = d / 2, groups = (heads + HEADS_PER_ITEM - 1) / HEADS_PER_ITEM;
    const int per_row = pairs * groups; /* items per row */
    const size_t cols = (size_t)heads * (size_t)d;
    /* (row, j) of the first item, and the step between a work-item's items, as whole rows
     * and a remainder, so that the loop divides nothing */
    const size_t gid = get_global_id(0), gsize = get_global_size(0);
    size_t row = gid / (size_t)per_row;
    int j = (int)(gid - row * (size_t)per_row);
    const size_t step_rows = gsize / (size_t)per_row;
    const int step_j = (int)(gsize - step_rows * (size_t)per_row);
    for (; row < (size_t)rows; row += step_rows) {
        const int i = j % pairs, h0 = j / pairs * HEADS_PER_ITEM;
        const size_t base = row * cols + (size_t)h0 * (size_t)d + (size_t)i;
        /* the loads first, in flight while the angle is formed */
        float x0[HEADS_PER_ITEM], x1[HEADS_PER_ITEM]; /* x[i], x[i + d/2] of each head */
#pragma unroll
        for (int k = 0; k < HEADS_PER_ITEM; k++) {
            const size_t at = base + (size_t)k * (size_t)d;
            const bool live = h0 + k < heads;
            x0[k] = live ? act_load(x, at) : 0.0f;
            x1[k] = live ? act_load(x, at + (size_t)pairs) : 0.0f;
        }
#if FREQ_PAIRS
        float2 cs = rope_cos_sin(pos[row], vload2(i, inv_freq));
#else
        float2 cs = rope_cos_sin(pos[row], (float2)(inv_freq[i], 0.0f));
#endif
        if (inverse)
            cs.y = -cs.y;
#pragma unroll
        for (int k = 0; k < HEADS_PER_ITEM; k++) {
            const size_t at = base + (size_t)k * (size_t)d;
            if (h0 + k < heads) {
                act_store(y, at, x0[k] * cs.x - x1[k] * cs.y);
                act_store(y, at + (size_t)pairs, x1[k] * cs.x + x0[k] * cs.y);
            }
        }
        j += step_j;
        if (j >= per_row) {
            j -= per_row;
            row++;
        }
    }
}
