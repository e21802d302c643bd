/*
 * The backward passes of softmax, layer norm and RMS norm on the CPU. Three steps, each split
 * across the backend's thread pool when the input is large enough (as the forward row
 * kernels):
 *
 *   1. per row, its statistics (the norms' mean and 1/std, in double), rows across threads;
 *   2. the weight gradients, columns across threads: each column's sum over the rows runs in
 *      row order in double, so the result does not depend on the number of threads;
 *   3. per row, dx, rows across threads.
 *
 * The weight gradients are taken before dx is written, so dx may be dy.
 *
 * As in the forward kernels (rows.c), every sum along a row keeps HD_CPU_LANES independent partial
 * sums in double, combined at the end: vector code without fast-math flags, the same order of
 * additions on every machine, and no chain of dependent adds to wait on.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vector.h"
#include "core/error.h"

/* Columns per block of the weight-gradient step: a block of each row is eight cache lines,
 * read as one stretch, and its sums (two of 128 doubles) stay in the first-level cache. */
#define COLUMN_BLOCK 128

/* The sum of a[j] * b[j], in double. */
static double row_dot(const float *a, const float *b, size_t n)
{
    double part[HD_CPU_LANES] = {0.0};
    size_t j = 0;
    for (; j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++)
            part[l] += (double)a[j + l] * b[j + l];
    for (; j < n; j++)
        part[0] += (double)a[j] * b[j];
    return hd__cpu_lanes_total(part);
}

/* The pool when the call is large enough to pay for waking it, else NULL (the caller alone). */
static hd_cpu_pool *pool_for(void *state, size_t rows, size_t cols)
{
    hd_cpu_state *cpu = state;
    return cpu != NULL && rows * cols >= HD_CPU_PARALLEL_ELEMENTS ? cpu->pool : NULL;
}

/* softmax: dx = y * (dy - sum(y*dy)); the sum in double. dx may be dy. */
HD_CPU_VECTOR_CLONES static void softmax_backward_row(const float *y, const float *dy, float *dx,
                                                      size_t n)
{
    double dot = row_dot(y, dy, n);
    for (size_t j = 0; j < n; j++)
        dx[j] = (float)((double)y[j] * ((double)dy[j] - dot));
}

static void softmax_backward_part(void *arg, size_t begin, size_t end)
{
    const hd_row_backward_args *r = arg;
    for (size_t i = begin; i < end; i++) {
        size_t at = i * r->cols;
        softmax_backward_row(r->x->state->host + at, r->dy->state->host + at,
                             r->dx->state->host + at, r->cols);
    }
}

hd_status hd__cpu_softmax_backward(void *state, hd_context *ctx, const hd_row_backward_args *r)
{
    (void)ctx;
    hd__cpu_pool_run(pool_for(state, r->rows, r->cols), r->rows, softmax_backward_part, (void *)r);
    return HD_OK;
}

/* Row i's mean (0 for RMS norm) and 1/sqrt(var + eps) (1/rms), from the forward's formula. */
HD_CPU_VECTOR_CLONES static void norm_stats_row(const float *x, size_t n, float eps, bool center,
                                                double *mean, double *rstd)
{
    double sum[HD_CPU_LANES] = {0.0}, sq[HD_CPU_LANES] = {0.0};
    size_t j = 0;
    for (; center && j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++)
            sum[l] += x[j + l];
    for (; center && j < n; j++)
        sum[0] += x[j];
    double m = center ? hd__cpu_lanes_total(sum) / (double)n : 0.0;
    for (j = 0; j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++) {
            double d = (double)x[j + l] - m;
            sq[l] += d * d;
        }
    for (; j < n; j++)
        sq[0] += ((double)x[j] - m) * ((double)x[j] - m);
    *mean = m;
    *rstd = 1.0 / sqrt(hd__cpu_lanes_total(sq) / (double)n + (double)eps);
}

/* dgamma[j] = sum_i dy[i][j] * xhat[i][j] and dbeta[j] = sum_i dy[i][j], for the columns of
 * one block, in row order. Either may be NULL. */
HD_CPU_VECTOR_CLONES static void norm_weight_grads_block(const hd_row_backward_args *r,
                                                         const double *mean, const double *rstd,
                                                         size_t j0, size_t j1, float *dgamma,
                                                         float *dbeta)
{
    const float *x = r->x->state->host, *dy = r->dy->state->host;
    double g[COLUMN_BLOCK] = {0.0}, b[COLUMN_BLOCK] = {0.0};
    for (size_t i = 0; i < r->rows; i++) {
        const float *xr = x + i * r->cols, *dyr = dy + i * r->cols;
        for (size_t j = j0; j < j1; j++) {
            g[j - j0] += (double)dyr[j] * (((double)xr[j] - mean[i]) * rstd[i]);
            b[j - j0] += dyr[j];
        }
    }
    for (size_t j = j0; j < j1; j++) {
        if (dgamma != NULL)
            dgamma[j] = (float)g[j - j0];
        if (dbeta != NULL)
            dbeta[j] = (float)b[j - j0];
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g*xhat)) with g = gamma*dy; RMS norm has no mean
 * (center false): dx = rstd * (g - xhat * mean(g*xhat)). dx may be dy. */
HD_CPU_VECTOR_CLONES static void norm_backward_row(const float *x, const float *gamma,
                                                   const float *dy, double mean, double rstd,
                                                   bool center, float *dx, size_t n)
{
    double sum_g[HD_CPU_LANES] = {0.0}, sum_gx[HD_CPU_LANES] = {0.0};
    size_t j = 0;
    for (; j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++) {
            double g = (double)gamma[j + l] * dy[j + l];
            sum_g[l] += g;
            sum_gx[l] += g * (((double)x[j + l] - mean) * rstd);
        }
    for (; j < n; j++) {
        double g = (double)gamma[j] * dy[j];
        sum_g[0] += g;
        sum_gx[0] += g * (((double)x[j] - mean) * rstd);
    }
    double mean_g = center ? hd__cpu_lanes_total(sum_g) / (double)n : 0.0;
    double mean_gx = hd__cpu_lanes_total(sum_gx) / (double)n;
    for (j = 0; j < n; j++) {
        double xhat = ((double)x[j] - mean) * rstd;
        dx[j] = (float)(rstd * ((double)gamma[j] * dy[j] - mean_g - xhat * mean_gx));
    }
}

/* One norm backward call as the pool runs its steps. */
typedef struct norm_job {
    const hd_row_backward_args *r;
    bool center;
    double *mean, *rstd;
} norm_job;

static void stats_part(void *arg, size_t begin, size_t end)
{
    const norm_job *job = arg;
    const hd_row_backward_args *r = job->r;
    for (size_t i = begin; i < end; i++)
        norm_stats_row(r->x->state->host + i * r->cols, r->cols, r->eps, job->center, &job->mean[i],
                       &job->rstd[i]);
}

static void weight_grads_part(void *arg, size_t begin, size_t end)
{
    const norm_job *job = arg;
    const hd_row_backward_args *r = job->r;
    float *dgamma = r->dgamma != NULL ? r->dgamma->state->host : NULL;
    float *dbeta = r->dbeta != NULL ? r->dbeta->state->host : NULL;
    for (size_t blk = begin; blk < end; blk++) {
        size_t j0 = blk * COLUMN_BLOCK;
        size_t j1 = j0 + COLUMN_BLOCK < r->cols ? j0 + COLUMN_BLOCK : r->cols;
        norm_weight_grads_block(r, job->mean, job->rstd, j0, j1, dgamma, dbeta);
    }
}

static void dx_part(void *arg, size_t begin, size_t end)
{
    const norm_job *job = arg;
    const hd_row_backward_args *r = job->r;
    for (size_t i = begin; i < end; i++) {
        size_t at = i * r->cols;
        norm_backward_row(r->x->state->host + at, r->gamma->state->host, r->dy->state->host + at,
                          job->mean[i], job->rstd[i], job->center, r->dx->state->host + at,
                          r->cols);
    }
}

static hd_status norm_backward(void *state, hd_context *ctx, const hd_row_backward_args *r,
                               bool center)
{
    size_t rows = r->rows, cols = r->cols;
    double *mean = malloc(2 * rows * sizeof *mean);
    if (mean == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY,
                         "norm backward: no memory for %zu rows' statistics", rows);
    norm_job job = {r, center, mean, mean + rows};
    hd_cpu_pool *pool = pool_for(state, rows, cols);
    hd__cpu_pool_run(pool, rows, stats_part, &job);
    if (r->dgamma != NULL || r->dbeta != NULL)
        hd__cpu_pool_run(pool, (cols + COLUMN_BLOCK - 1) / COLUMN_BLOCK, weight_grads_part, &job);
    hd__cpu_pool_run(pool, rows, dx_part, &job);
    free(mean);
    return HD_OK;
}

hd_status hd__cpu_layer_norm_backward(void *state, hd_context *ctx, const hd_row_backward_args *r)
{
    return norm_backward(state, ctx, r, true);
}

hd_status hd__cpu_rms_norm_backward(void *state, hd_context *ctx, const hd_row_backward_args *r)
{
    return norm_backward(state, ctx, r, false);
}
