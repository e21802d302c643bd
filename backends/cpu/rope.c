/*
 * RoPE on the CPU (rotate-half convention, in place), rows across the backend's pool. A row's
 * angles are computed once, in double, and serve all its heads: a = p * (hi + lo) is exact to
 * double's rounding (p below 2^24 and the float hi and lo hold 24 bits each), and cos and sin
 * of it in double are far inside the float output's rounding at any position, where a float
 * angle at p ~ 1e5 is already off by 0.004 rad. The rotation is done in double too, one
 * rounding per output.
 */
#include <math.h>

#include "backends/cpu/step.h"
#include "backends/cpu/vector.h"

/* Angles per block of a row: their cosines and sines stay in the first-level cache while the
 * block is applied to every head. */
#define ANGLE_BLOCK 64

typedef struct rope_job {
    size_t heads, d;
    const int32_t *pos;
    const float *inv_freq;
    bool inverse;
    float *x;
} rope_job;

/* Rotates the pairs (x0[i], x1[i]) by the angles whose cosines and sines are c, s. */
HD_CPU_VECTOR_CLONES static void rotate(float *x0, float *x1, const double *c, const double *s,
                                        size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        double a = x0[i], b = x1[i];
        x0[i] = (float)(a * c[i] - b * s[i]);
        x1[i] = (float)(b * c[i] + a * s[i]);
    }
}

static void rope_row(const rope_job *j, size_t row)
{
    const size_t pairs = j->d / 2;
    const double p = j->pos[row];
    float *x = j->x + row * j->heads * j->d;
    double c[ANGLE_BLOCK], s[ANGLE_BLOCK];
    for (size_t i0 = 0; i0 < pairs; i0 += ANGLE_BLOCK) {
        size_t n = pairs - i0 < ANGLE_BLOCK ? pairs - i0 : ANGLE_BLOCK;
        for (size_t i = 0; i < n; i++) {
            const float *f = j->inv_freq + 2 * (i0 + i);
            double a = p * f[0] + p * f[1];
            c[i] = cos(a);
            s[i] = j->inverse ? -sin(a) : sin(a);
        }
        for (size_t h = 0; h < j->heads; h++) {
            float *x0 = x + h * j->d + i0;
            rotate(x0, x0 + pairs, c, s, n);
        }
    }
}

static void rope_part(void *arg, size_t begin, size_t end)
{
    for (size_t row = begin; row < end; row++)
        rope_row(arg, row);
}

void hd__cpu_rope(hd_cpu_pool *pool, size_t rows, size_t heads, size_t d, const int32_t *pos,
                  const float *inv_freq, bool inverse, float *x)
{
    rope_job job = {heads, d, pos, inv_freq, inverse, x};
    bool parallel = rows > 1 && rows * heads * d >= HD_CPU_PARALLEL_ELEMENTS;
    hd__cpu_pool_run(parallel ? pool : NULL, rows, rope_part, &job);
}
