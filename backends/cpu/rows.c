/*
 * Softmax, layer norm and RMS norm on the CPU, one row at a time. Rows are split across
 * threads when the input is large enough to pay for waking them. Sums are accumulated in
 * double: a 32768-wide row summed in float loses about four digits.
 */
#include <math.h>

#include "backends/cpu/cpu.h"

/* Below this many elements one thread is faster than waking the pool. */
#define HD_CPU_PARALLEL_ELEMENTS 65536

static void softmax_row(const float *x, float *y, size_t n)
{
    float max = x[0];
    for (size_t j = 1; j < n; j++)
        max = x[j] > max ? x[j] : max;
    double sum = 0.0;
    for (size_t j = 0; j < n; j++) {
        float e = expf(x[j] - max); /* NaN anywhere in the row makes the sum, so the row, NaN */
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
