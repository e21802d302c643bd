/*
 * What the CPU kernels share inside their loops: the size below which a call stays on its
 * thread, the width of a row's partial sums, and e^d for d <= 0 in a form the compiler
 * vectorizes. Header-only, so that each is inlined into the loop that uses it.
 */
#ifndef HD_BACKENDS_CPU_VECTOR_H
#define HD_BACKENDS_CPU_VECTOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Below this many elements one thread is faster than waking the pool. */
#define HD_CPU_PARALLEL_ELEMENTS 65536

/* Independent partial sums per pass along a row: two SSE vectors of floats, four of doubles;
 * combined at the end, so the order of additions is the same on every machine and no chain of
 * dependent adds is waited on. */
#define HD_CPU_LANES 8

/* The sum of a row's HD_CPU_LANES partial sums, in lane order. */
static inline double hd__cpu_lanes_total(const double *part)
{
    double total = 0.0;
    for (size_t l = 0; l < HD_CPU_LANES; l++)
        total += part[l];
    return total;
}

/* The largest of start and x[0 .. n-1] over HD_CPU_LANES lanes; a NaN in x is passed over (and
 * a NaN start stays). */
static inline float hd__cpu_row_max(const float *x, size_t n, float start)
{
    float max[HD_CPU_LANES];
    for (size_t l = 0; l < HD_CPU_LANES; l++)
        max[l] = start;
    size_t j = 0;
    for (; j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++)
            max[l] = x[j + l] > max[l] ? x[j + l] : max[l];
    for (; j < n; j++)
        max[0] = x[j] > max[0] ? x[j] : max[0];
    for (size_t l = 1; l < HD_CPU_LANES; l++)
        max[0] = max[l] > max[0] ? max[l] : max[0];
    return max[0];
}

/* Adding this to a float in [-2^22, 2^22] rounds it to an integer, held in the low mantissa
 * bits (1.5 * 2^23). */
#define HD_CPU_ROUND_MAGIC 12582912.0f

/* The core of the vectorizable exponentials: e^r for |r| <= ln2/2 from its degree-7 Taylor
 * polynomial (error below 6e-9), times 2^n built in the exponent bits from t = n +
 * HD_CPU_ROUND_MAGIC as the rounding left it (its low mantissa bits hold 0x400000 + n:
 * unsigned arithmetic, so that a NaN has a defined result too). */
static inline float hd__cpu_exp_reduced(float r, float t)
{
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t t_bits;
    memcpy(&t_bits, &t, sizeof t_bits);
    uint32_t bits = (t_bits - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* e^d for d in [-inf, 0], within 2 ulp (libm's expf is a call per element, which keeps the
 * loop around it scalar): d = n*ln2 + r with |r| <= ln2/2. Below -87, e^d is under FLT_MIN:
 * 0. A NaN d gives NaN. */
static inline float hd__cpu_exp_nonpositive(float d)
{
    const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f;
    float dc = d < -87.0f ? -87.0f : d;
    float t = dc * log2e + HD_CPU_ROUND_MAGIC;
    float n = t - HD_CPU_ROUND_MAGIC;
    float r = (dc - n * ln2_hi) - n * ln2_lo;
    return d < -87.0f ? 0.0f : hd__cpu_exp_reduced(r, t);
}

#endif
