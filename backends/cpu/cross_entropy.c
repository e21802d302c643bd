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

/* Below this many logits one thread is faster than waking the pool (as rows.c). */
#define PARALLEL_ELEMENTS 65536
/* Partial results per pass along a row: two SSE vectors of floats, four of doubles. */
#define LANES 8

/* e^d for d in [-inf, 0], within 2 ulp, as a loop the compiler vectorizes (rows.c's softmax has
 * the same; libm's expf is a call per element). d = n*ln2 + r with |r| <= ln2/2; e^r from its
 * degree-7 Taylor polynomial; 2^n built in the exponent bits. Below -87, e^d is under FLT_MIN:
 * 0. A NaN d gives NaN. */
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
    uint32_t t_bits;
    memcpy(&t_bits, &t, sizeof t_bits);
    uint32_t bits = (t_bits - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return d < -87.0f ? 0.0f : p * scale;
}

/* The row's maximum, at least -FLT_MAX: a row of -inf then gives exp(-inf) = 0 for every
 * element, never exp(-inf + inf) (its sum is 0 and its lse -inf, as PyTorch's logsumexp). A
 * NaN is passed over here and caught by the sum. */
static inline float row_max(const float *x, size_t n)
{
    float max[LANES];
    for (size_t l = 0; l < LANES; l++)
        max[l] = -FLT_MAX;
    size_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (size_t l = 0; l < LANES; l++)
            max[l] = x[j + l] > max[l] ? x[j + l] : max[l];
    for (; j < n; j++)
        max[0] = x[j] > max[0] ? x[j] : max[0];
    for (size_t l = 1; l < LANES; l++)
        max[0] = max[l] > max[0] ? max[l] : max[0];
    return max[0];
}

/* The sum of exp(x - max), in double; NaN where a logit is NaN or +inf. */
static inline double row_exp_sum(const float *x, float max, size_t n)
{
    double part[LANES] = {0.0};
    size_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (size_t l = 0; l < LANES; l++)
            part[l] += exp_nonpositive(x[j + l] - max);
    for (; j < n; j++)
        part[0] += exp_nonpositive(x[j] - max);
    double total = 0.0;
    for (size_t l = 0; l < LANES; l++)
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
        dx[j] = (float)(exp_nonpositive(x[j] - max) * scale);
    dx[target] = (float)(((double)exp_nonpositive(xt - max) / sum - 1.0) * inv_count);
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
    float max = row_max(x, n);
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
    bool parallel = rows > 1 && rows * vocab >= PARALLEL_ELEMENTS;
    hd__cpu_pool_run(parallel ? pool : NULL, rows, ce_part, &job);
    if (loss == NULL)
        return;
    double total = 0.0;
    for (size_t i = 0; i < rows; i++)
        total += losses[i];
    *loss = (float)(total * inv_count);
}
