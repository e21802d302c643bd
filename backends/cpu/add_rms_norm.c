/*
 * Residual add + RMS norm on the CPU, forward and backward (step.h). Rows are split across the
 * pool's threads when the call is large enough to pay for waking it. Sums along a row keep
 * HD_CPU_LANES partial sums in double (vector code without fast-math flags, the same order on every
 * machine), and double holds the square of any float: rows of 1e30 or 1e-30 need no scaling.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backends/cpu/step.h"
#include "backends/cpu/vector.h"

/* Columns per block of the weight-gradient step: a block of each row is eight cache lines, and
 * its sums (128 doubles) stay in the first-level cache. */
#define COLUMN_BLOCK 128

static hd_cpu_pool *pool_for(hd_cpu_pool *pool, size_t rows, size_t cols)
{
    return rows > 1 && rows * cols >= HD_CPU_PARALLEL_ELEMENTS ? pool : NULL;
}

/* h = x + r over the row (h may be x or r: each element is read before it is written, so the
 * vector loop is safe with equal or disjoint pointers), then 1/rms in double and y. */
HD_CPU_VECTOR_CLONES static void add_rms_norm_row(const float *x, const float *r, const float *w,
                                                  float eps, float *h, float *y, size_t n)
{
#pragma omp simd
    for (size_t j = 0; j < n; j++)
        h[j] = x[j] + r[j];
    double part[HD_CPU_LANES] = {0.0};
    size_t j = 0;
    for (; j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++)
            part[l] += (double)h[j + l] * h[j + l];
    for (; j < n; j++)
        part[0] += (double)h[j] * h[j];
    /* 1/rms in double: near FLT_MAX it is about 1e-38, which float holds to a few bits */
    double rrms = 1.0 / sqrt(hd__cpu_lanes_total(part) / (double)n + (double)eps);
#pragma omp simd /* y aliases nothing */
    for (j = 0; j < n; j++)
        y[j] = (float)(h[j] * rrms) * w[j];
}

typedef struct forward_job {
    size_t cols;
    const float *x, *r, *w;
    float eps;
    float *h, *y;
} forward_job;

static void forward_part(void *arg, size_t begin, size_t end)
{
    const forward_job *f = arg;
    for (size_t i = begin; i < end; i++) {
        size_t at = i * f->cols;
        add_rms_norm_row(f->x + at, f->r + at, f->w, f->eps, f->h + at, f->y + at, f->cols);
    }
}

void hd__cpu_add_rms_norm(hd_cpu_pool *pool, size_t rows, size_t cols, const float *x,
                          const float *r, const float *w, float eps, float *h, float *y)
{
    forward_job job = {cols, x, r, w, eps, h, y};
    hd__cpu_pool_run(pool_for(pool, rows, cols), rows, forward_part, &job);
}

/* A row's rstd = 1/sqrt(mean h^2 + eps) and sgx = mean_j(w*dy*h) * rstd^2 (mean(g*xhat) / rstd,
 * so that dh = rstd * (g - h * sgx)), in double. */
HD_CPU_VECTOR_CLONES static void backward_stats_row(const float *h, const float *w, const float *dy,
                                                    float eps, size_t n, double *rstd, double *sgx)
{
    double sq[HD_CPU_LANES] = {0.0}, gh[HD_CPU_LANES] = {0.0};
    size_t j = 0;
    for (; j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++) {
            sq[l] += (double)h[j + l] * h[j + l];
            gh[l] += (double)w[j + l] * dy[j + l] * h[j + l];
        }
    for (; j < n; j++) {
        sq[0] += (double)h[j] * h[j];
        gh[0] += (double)w[j] * dy[j] * h[j];
    }
    double r = 1.0 / sqrt(hd__cpu_lanes_total(sq) / (double)n + (double)eps);
    *rstd = r;
    *sgx = hd__cpu_lanes_total(gh) / (double)n * r * r;
}

/* dh = rstd * (w*dy - h*sgx) + dres over the row; dh may be dy or dres. */
HD_CPU_VECTOR_CLONES static void backward_apply_row(const float *h, const float *w, const float *dy,
                                                    const float *dres, double rstd, double sgx,
                                                    float *dh, size_t n)
{
    if (dres == NULL) {
#pragma omp simd
        for (size_t j = 0; j < n; j++)
            dh[j] = (float)(rstd * ((double)w[j] * dy[j] - (double)h[j] * sgx));
    } else {
#pragma omp simd
        for (size_t j = 0; j < n; j++)
            dh[j] = (float)(rstd * ((double)w[j] * dy[j] - (double)h[j] * sgx) + dres[j]);
    }
}

typedef struct backward_job {
    size_t rows, cols;
    const float *h, *w, *dy, *dres;
    float eps;
    float *dh, *dw;
    double *rstd, *sgx; /* per row; NULL: each row's statistics kept only while it is done */
} backward_job;

static void stats_part(void *arg, size_t begin, size_t end)
{
    const backward_job *b = arg;
    for (size_t i = begin; i < end; i++)
        backward_stats_row(b->h + i * b->cols, b->w, b->dy + i * b->cols, b->eps, b->cols,
                           &b->rstd[i], &b->sgx[i]);
}

/* dw[j] = sum_i dy[i][j] * h[i][j] * rstd[i], for the columns j0 .. j1-1, in row order. */
HD_CPU_VECTOR_CLONES static void weight_grads_block(const backward_job *b, size_t j0, size_t j1)
{
    double g[COLUMN_BLOCK] = {0.0};
    for (size_t i = 0; i < b->rows; i++) {
        const float *hr = b->h + i * b->cols, *dyr = b->dy + i * b->cols;
        double r = b->rstd[i];
#pragma omp simd
        for (size_t j = j0; j < j1; j++)
            g[j - j0] += (double)dyr[j] * ((double)hr[j] * r);
    }
    for (size_t j = j0; j < j1; j++)
        b->dw[j] = (float)g[j - j0];
}

static void weight_grads_part(void *arg, size_t begin, size_t end)
{
    const backward_job *b = arg;
    for (size_t blk = begin; blk < end; blk++) {
        size_t j0 = blk * COLUMN_BLOCK;
        weight_grads_block(b, j0, j0 + COLUMN_BLOCK < b->cols ? j0 + COLUMN_BLOCK : b->cols);
    }
}

static void apply_part(void *arg, size_t begin, size_t end)
{
    const backward_job *b = arg;
    for (size_t i = begin; i < end; i++) {
        size_t at = i * b->cols;
        double rstd, sgx;
        if (b->rstd != NULL) {
            rstd = b->rstd[i];
            sgx = b->sgx[i];
        } else {
            backward_stats_row(b->h + at, b->w, b->dy + at, b->eps, b->cols, &rstd, &sgx);
        }
        backward_apply_row(b->h + at, b->w, b->dy + at, b->dres != NULL ? b->dres + at : NULL, rstd,
                           sgx, b->dh + at, b->cols);
    }
}

/* Without dw, one pass per row (its statistics, then dh). With dw, the rows' statistics first,
 * then dw by column blocks (before dh, which may overwrite dy), then dh. */
hd_status hd__cpu_add_rms_norm_backward(hd_cpu_pool *pool, size_t rows, size_t cols, const float *h,
                                        const float *w, const float *dy, const float *dres,
                                        float eps, float *dh, float *dw)
{
    backward_job job = {rows, cols, h, w, dy, dres, eps, dh, dw, NULL, NULL};
    hd_cpu_pool *p = pool_for(pool, rows, cols);
    if (dw == NULL) {
        hd__cpu_pool_run(p, rows, apply_part, &job);
        return HD_OK;
    }
    double *stats = malloc(2 * rows * sizeof *stats);
    if (stats == NULL)
        return HD_ERR_OUT_OF_MEMORY;
    job.rstd = stats;
    job.sgx = stats + rows;
    hd__cpu_pool_run(p, rows, stats_part, &job);
    hd__cpu_pool_run(p, (cols + COLUMN_BLOCK - 1) / COLUMN_BLOCK, weight_grads_part, &job);
    hd__cpu_pool_run(p, rows, apply_part, &job);
    free(stats);
    return HD_OK;
}
