/*
 * Cross-entropy over a vocabulary on the CPU (step.h): per row the maximum, the sum of
 * exp(x - max) in double, then the loss and the gradient; rows split across the pool's threads
 * when the call is large enough; the mean added in row order afterwards, so that it is the same
 * whatever the thread count.
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/step.h"
#include "backends/cpu/vector.h"

/* The sum of exp(x - max), in double; NaN where a logit is NaN or +inf. */
static inline double row_exp_sum(const float *x, float max, size_t n)
{
    double part[HD_CPU_LANES] = {0.0};
    size_t j = 0;
    for (; j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++)
            part[l] += hd__cpu_exp_nonpositive(x[j + l] - max);
    for (; j < n; j++)
        part[0] += hd__cpu_exp_nonpositive(x[j] - max);
    double total = 0.0;
    for (size_t l = 0; l < HD_CPU_LANES; l++)
        total += part[l];
    return total;
}

typedef struct ce_job {
    size_t vocab;
    const float *logits;
    const int32_t *targets;
    int32_t ignore_index;
    float inv_count;
    float *losses, *lse, *dlogits;
} ce_job;

/* dx = (exp(x - max) / sum - onehot(target)) * inv_count; dx may be x. */
HD_CPU_VECTOR_CLONES static void dlogits_row(const float *x, float max, double sum, size_t target,
                                             float inv_count, float *dx, size_t n)
{
    double scale = (double)inv_count / sum;
    float xt = x[target]; /* before dx, which may be x, is written */
#pragma omp simd
    for (size_t j = 0; j < n; j++)
        dx[j] = (float)(hd__cpu_exp_nonpositive(x[j] - max) * scale);
    dx[target] = (float)(((double)hd__cpu_exp_nonpositive(xt - max) / sum - 1.0) * inv_count);
}

HD_CPU_VECTOR_CLONES static void ce_row(const ce_job *c, size_t i)
{
    size_t n = c->vocab, at = i * n;
    const float *x = c->logits + at;
    int32_t target = c->targets[i];
    bool counted = target != c->ignore_index;
    float *dx = c->dlogits != NULL ? c->dlogits + at : NULL;
    if (!counted && c->lse == NULL) {
        c->losses[i] = 0.0f;
        if (dx != NULL)
            memset(dx, 0, n * sizeof *dx);
        return;
    }
    /* at least -FLT_MAX: a row of -inf then gives exp(-inf) = 0 for every element, never
     * exp(-inf + inf) (its sum is 0 and its lse -inf, as PyTorch's logsumexp); a NaN is passed
     * over here and caught by the sum */
    float max = hd__cpu_row_max(x, n, -FLT_MAX);
    double sum = row_exp_sum(x, max, n), log_sum = log(sum);
    if (c->lse != NULL)
        c->lse[i] = (float)((double)max + log_sum);
    c->losses[i] = counted ? (float)(((double)max - x[target]) + log_sum) : 0.0f;
    if (dx == NULL)
        return;
    if (counted)
        dlogits_row(x, max, sum, (size_t)target, c->inv_count, dx, n);
    else
        memset(dx, 0, n * sizeof *dx);
}

static void ce_part(void *arg, size_t begin, size_t end)
{
    for (size_t i = begin; i < end; i++)
        ce_row(arg, i);
}

void hd__cpu_cross_entropy(hd_cpu_pool *pool, size_t rows, size_t vocab, const float *logits,
                           const int32_t *targets, int32_t ignore_index, float inv_count,
                           float *losses, float *lse, float *dlogits, float *loss)
{
    ce_job job = {vocab, logits, targets, ignore_index, inv_count, losses, lse, dlogits};
    bool parallel = rows > 1 && rows * vocab >= HD_CPU_PARALLEL_ELEMENTS;
    hd__cpu_pool_run(parallel ? pool : NULL, rows, ce_part, &job);
    if (loss == NULL)
        return;
    double total = 0.0;
    for (size_t i = 0; i < rows; i++)
        total += losses[i];
    *loss = (float)(total * inv_count);
}
