/*
 * Softmax, layer norm and RMS norm on the CPU, one row at a time. Rows are split across
 * threads when the input is large enough to pay for waking them. Sums are accumulated in
 * double: a 32768-wide row summed in float loses about four digits.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu.h"

/* Below this many elements one thread is faster than waking the pool. */
#define HD_CPU_PARALLEL_ELEMENTS 65536

/* e^d for d in [-inf, 0], within 2 ulp, written so the compiler vectorizes the loop around
 * it (libm's expf is a call per element: it made softmax five times slower than the norms).
 * d = n*ln2 + r with |r| <= ln2/2; e^r from its degree-7 Taylor polynomial (error below
 * 6e-9); 2^n built in the exponent bits. Below -87, e^d is under FLT_MIN: 0. */
static inline float exp_nonpositive(float d)
{
    const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f;
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float dc = d < -87.0f ? -87.0f : d;
    float t = dc * log2e + round_magic;
    float n = t - round_magic;
    float r = (dc - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23; /* 2^n: n is in [-126, 0] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return d < -87.0f ? 0.0f : p * scale;
}

static void softmax_row(const float *x, float *y, size_t n)
{
    float max = x[0];
    bool nan = false;
#pragma omp simd reduction(max : max) reduction(| : nan)
    for (size_t j = 0; j < n; j++) {
        max = x[j] > max ? x[j] : max;
        nan |= x[j] != x[j];
    }
    /* NaN anywhere, +inf (inf - inf) or a row of -inf: the reference's row is NaN. */
    if (nan || !isfinite(max)) {
        for (size_t j = 0; j < n; j++)
            y[j] = NAN;
        return;
    }
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (size_t j = 0; j < n; j++) {
        float e = exp_nonpositive(x[j] - max);
        y[j] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (size_t j = 0; j < n; j++)
        y[j] *= inv;
}

static void layer_norm_row(const float *x, const float *gamma, const float *beta, float eps,
                           float *y, size_t n)
{
    double sum = 0.0;
    for (size_t j = 0; j < n; j++)
        sum += x[j];
    double mean = sum / (double)n;
    double sq = 0.0; /* second pass over deviations: no cancellation as in E[x^2] - E[x]^2 */
    for (size_t j = 0; j < n; j++) {
        double d = x[j] - mean;
        sq += d * d;
    }
    float rstd = (float)(1.0 / sqrt(sq / (double)n + eps));
    /* The deviation in double: a mean rounded to float is off by up to half an ulp of the
     * mean, which for rows far from zero (mean 1000, sigma 1) is 3e-5 sigma. */
    for (size_t j = 0; j < n; j++)
        y[j] = (float)(x[j] - mean) * rstd * gamma[j] + beta[j];
}

static void rms_norm_row(const float *x, const float *weight, float eps, float *y, size_t n)
{
    double sq = 0.0;
    for (size_t j = 0; j < n; j++)
        sq += (double)x[j] * x[j];
    float rrms = (float)(1.0 / sqrt(sq / (double)n + eps));
    for (size_t j = 0; j < n; j++)
        y[j] = x[j] * rrms * weight[j];
}

static bool parallel_worth_it(const hd_row_args *r)
{
    return r->rows > 1 && r->rows * r->cols >= HD_CPU_PARALLEL_ELEMENTS;
}

hd_status hd__cpu_softmax(void *state, hd_context *ctx, const hd_row_args *r)
{
    (void)state;
    (void)ctx;
    const float *x = r->x->host;
    float *y = r->y->host;
    size_t cols = r->cols;
    long rows = (long)r->rows;
#ifdef HD_HAVE_OPENMP
#pragma omp parallel for schedule(static) if (parallel_worth_it(r))
#endif
    for (long i = 0; i < rows; i++)
        softmax_row(x + (size_t)i * cols, y + (size_t)i * cols, cols);
    (void)parallel_worth_it;
    return HD_OK;
}

hd_status hd__cpu_layer_norm(void *state, hd_context *ctx, const hd_row_args *r)
{
    (void)state;
    (void)ctx;
    const float *x = r->x->host, *gamma = r->gamma->host, *beta = r->beta->host;
    float *y = r->y->host;
    size_t cols = r->cols;
    long rows = (long)r->rows;
#ifdef HD_HAVE_OPENMP
#pragma omp parallel for schedule(static) if (parallel_worth_it(r))
#endif
    for (long i = 0; i < rows; i++)
        layer_norm_row(x + (size_t)i * cols, gamma, beta, r->eps, y + (size_t)i * cols, cols);
    return HD_OK;
}

hd_status hd__cpu_rms_norm(void *state, hd_context *ctx, const hd_row_args *r)
{
    (void)state;
    (void)ctx;
    const float *x = r->x->host, *weight = r->gamma->host;
    float *y = r->y->host;
    size_t cols = r->cols;
    long rows = (long)r->rows;
#ifdef HD_HAVE_OPENMP
#pragma omp parallel for schedule(static) if (parallel_worth_it(r))
#endif
    for (long i = 0; i < rows; i++)
        rms_norm_row(x + (size_t)i * cols, weight, r->eps, y + (size_t)i * cols, cols);
    return HD_OK;
}
