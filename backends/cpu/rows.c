/*
 * Softmax, layer norm and RMS norm on the CPU, one row at a time. Rows are split across the
 * backend's thread pool (pool.c) when the input is large enough to pay for waking it. Sums are
 * accumulated in double: a 32768-wide row summed in float loses about four digits.
 *
 * Each pass over a row keeps HD_CPU_LANES independent partial results (maximum, sums) that are
 * combined at the end. The compiler may not reorder a floating-point reduction by itself, so a
 * single accumulator makes every pass a scalar chain of dependent adds (4 cycles per element);
 * written with lanes, the sums are vector code without any fast-math flag and the maximum runs
 * as eight independent chains, and the order of the additions is the same on every machine.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vector.h"

/* The sum of x, in double. */
static double row_sum(const float *x, size_t n)
{
    double part[HD_CPU_LANES] = {0.0};
    size_t j = 0;
    for (; j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++)
            part[l] += x[j + l];
    for (; j < n; j++)
        part[0] += x[j];
    return hd__cpu_lanes_total(part);
}

/* Four plain loops: the maximum, e^(x - max) into y, the sum of y, the scaling; a row that
 * fits the first-level cache is read from there after the first. y may be x. */
HD_CPU_VECTOR_CLONES static void softmax_row(const float *x, float *y, size_t n)
{
    float max = hd__cpu_row_max(x, n, x[0]); /* NaN if x[0] is; a later NaN is passed over */
    /* +inf (inf - inf), a row of -inf, or NaN first: the reference's row is NaN */
    if (!isfinite(max)) {
        for (size_t j = 0; j < n; j++)
            y[j] = NAN;
        return;
    }
    for (size_t j = 0; j < n; j++)
        y[j] = hd__cpu_exp_nonpositive(x[j] - max);
    /* a NaN after the first element makes the sum NaN, and with it the whole row */
    float inv = (float)(1.0 / row_sum(y, n));
    for (size_t j = 0; j < n; j++)
        y[j] *= inv;
}

/* The sum of the squared deviations of x from mean, in double. */
static double row_squares(const float *x, double mean, size_t n)
{
    double part[HD_CPU_LANES] = {0.0};
    size_t j = 0;
    for (; j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++) {
            double d = x[j + l] - mean;
            part[l] += d * d;
        }
    for (; j < n; j++) {
        double d = x[j] - mean;
        part[0] += d * d;
    }
    return hd__cpu_lanes_total(part);
}

HD_CPU_VECTOR_CLONES static void layer_norm_row(const float *x, const float *gamma,
                                                const float *beta, float eps, float *y, size_t n)
{
    double mean = row_sum(x, n) / (double)n;
    /* second pass over deviations: no cancellation as in E[x^2] - E[x]^2 */
    double sq = row_squares(x, mean, n);
    double rstd = 1.0 / sqrt(sq / (double)n + eps);
    /* The deviation in double: a mean rounded to float is off by up to half an ulp of the
     * mean, which for rows far from zero (mean 1000, sigma 1) is 3e-5 sigma; and scaled in
     * double, since near FLT_MAX the deviation itself (up to twice it) and 1/std (about
     * 1e-38) leave float's range. */
    for (size_t j = 0; j < n; j++)
        y[j] = (float)((x[j] - mean) * rstd) * gamma[j] + beta[j];
}

HD_CPU_VECTOR_CLONES static void rms_norm_row(const float *x, const float *weight, float eps,
                                              float *y, size_t n)
{
    /* 1/rms in double: near FLT_MAX it is about 1e-38, which float holds to a few bits */
    double rrms = 1.0 / sqrt(row_squares(x, 0.0, n) / (double)n + eps);
    for (size_t j = 0; j < n; j++)
        y[j] = (float)(x[j] * rrms) * weight[j];
}

/* One row op over a range of rows, as the pool runs it. */
typedef struct rows_job {
    const hd_row_args *r;
    void (*row)(const hd_row_args *r, size_t i);
} rows_job;

static void rows_part(void *arg, size_t begin, size_t end)
{
    const rows_job *job = arg;
    for (size_t i = begin; i < end; i++)
        job->row(job->r, i);
}

/* Below HD_CPU_PARALLEL_ELEMENTS, or with one row, one thread is faster than waking the
 * pool. */
static hd_status run_rows(void *state, const hd_row_args *r,
                          void (*row)(const hd_row_args *r, size_t i))
{
    hd_cpu_state *cpu = state;
    rows_job job = {r, row};
    bool parallel = r->rows > 1 && r->rows * r->cols >= HD_CPU_PARALLEL_ELEMENTS;
    hd__cpu_pool_run(parallel && cpu != NULL ? cpu->pool : NULL, r->rows, rows_part, &job);
    return HD_OK;
}

static void softmax_one(const hd_row_args *r, size_t i)
{
    size_t at = i * r->cols;
    softmax_row(r->x->state->host + at, r->y->state->host + at, r->cols);
}

static void layer_norm_one(const hd_row_args *r, size_t i)
{
    size_t at = i * r->cols;
    layer_norm_row(r->x->state->host + at, r->gamma->state->host, r->beta->state->host, r->eps,
                   r->y->state->host + at, r->cols);
}

static void rms_norm_one(const hd_row_args *r, size_t i)
{
    size_t at = i * r->cols;
    rms_norm_row(r->x->state->host + at, r->gamma->state->host, r->eps, r->y->state->host + at,
                 r->cols);
}

hd_status hd__cpu_softmax(void *state, hd_context *ctx, const hd_row_args *r)
{
    (void)ctx;
    return run_rows(state, r, softmax_one);
}

hd_status hd__cpu_layer_norm(void *state, hd_context *ctx, const hd_row_args *r)
{
    (void)ctx;
    return run_rows(state, r, layer_norm_one);
}

hd_status hd__cpu_rms_norm(void *state, hd_context *ctx, const hd_row_args *r)
{
    (void)ctx;
    return run_rows(state, r, rms_norm_one);
}
