/*
 * AdamW over many tensors on the CPU (step.h), with the optional global gradient-norm clip.
 * The work is cut into units of UNIT elements of one tensor each (a tensor's last unit may be
 * shorter), split across the pool's threads: the norm's sum of squares per unit in double, the
 * units' sums then added in order, so that the norm is the same whatever the thread count; the
 * update is elementwise in float, with the arithmetic of adamw.cl.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/cpu/step.h"
#include "backends/cpu/vector.h"

/* Elements per unit of work: 64 KiB of each of the four arrays. */
#define UNIT 16384

typedef struct adamw_job {
    const hd_adamw_tensor *t;
    size_t count;
    const size_t *first; /* first[k]: tensor k's first unit; first[count]: the units */
    const hd_adamw_factors *f;
    float coef;
    double *sums; /* per unit: the sum of g^2 */
} adamw_job;

/* The tensor of unit u: the last k with first[k] <= u (empty tensors have no unit). */
static size_t tensor_of(const adamw_job *job, size_t u)
{
    size_t lo = 0, hi = job->count; /* first[lo] <= u < first[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (job->first[mid] <= u)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

HD_CPU_VECTOR_CLONES static double sum_squares(const float *g, size_t n)
{
    double part[HD_CPU_LANES] = {0.0};
    size_t j = 0;
    for (; j + HD_CPU_LANES <= n; j += HD_CPU_LANES)
        for (size_t l = 0; l < HD_CPU_LANES; l++)
            part[l] += (double)g[j + l] * g[j + l];
    for (; j < n; j++)
        part[0] += (double)g[j] * g[j];
    double total = 0.0;
    for (size_t l = 0; l < HD_CPU_LANES; l++)
        total += part[l];
    return total;
}

HD_CPU_VECTOR_CLONES static void update(float *restrict p, const float *restrict g,
                                        float *restrict m, float *restrict v, size_t n,
                                        const hd_adamw_factors *f, float coef)
{
    const float decay = f->decay, b1 = f->beta1, a1 = f->one_minus_beta1, b2 = f->beta2,
                a2 = f->one_minus_beta2, step = f->step_size, ibc2 = f->inv_bc2_sqrt, eps = f->eps;
#pragma omp simd
    for (size_t j = 0; j < n; j++) {
        float gi = g[j] * coef;
        float mi = b1 * m[j] + a1 * gi;
        float vi = b2 * v[j] + a2 * (gi * gi);
        float pi = p[j] * decay;
        p[j] = pi - step * (mi / (sqrtf(vi) * ibc2 + eps));
        m[j] = mi;
        v[j] = vi;
    }
}

/* Unit u as (tensor, offset, length). */
static const hd_adamw_tensor *unit_span(const adamw_job *job, size_t u, size_t *k, size_t *off,
                                        size_t *n)
{
    if (*k + 1 < job->count && job->first[*k + 1] <= u)
        *k = tensor_of(job, u);
    const hd_adamw_tensor *t = &job->t[*k];
    *off = (u - job->first[*k]) * UNIT;
    *n = t->n - *off < UNIT ? t->n - *off : UNIT;
    return t;
}

static void norm_part(void *arg, size_t begin, size_t end)
{
    adamw_job *job = arg;
    size_t k = tensor_of(job, begin), off, n;
    for (size_t u = begin; u < end; u++) {
        const hd_adamw_tensor *t = unit_span(job, u, &k, &off, &n);
        job->sums[u] = sum_squares(t->g + off, n);
    }
}

static void update_part(void *arg, size_t begin, size_t end)
{
    adamw_job *job = arg;
    size_t k = tensor_of(job, begin), off, n;
    for (size_t u = begin; u < end; u++) {
        const hd_adamw_tensor *t = unit_span(job, u, &k, &off, &n);
        update(t->p + off, t->g + off, t->m + off, t->v + off, n, job->f, job->coef);
    }
}

hd_status hd__cpu_adamw(hd_cpu_pool *pool, const hd_adamw_tensor *t, size_t count,
                        const hd_adamw_factors *f, float max_norm, float *total)
{
    size_t *first = malloc((count + 1) * sizeof *first);
    if (first == NULL)
        return HD_ERR_OUT_OF_MEMORY;
    size_t elements = 0;
    first[0] = 0;
    for (size_t k = 0; k < count; k++) {
        first[k + 1] = first[k] + (t[k].n + UNIT - 1) / UNIT;
        elements += t[k].n;
    }
    size_t units = first[count];
    adamw_job job = {t, count, first, f, 1.0f, NULL};
    hd_cpu_pool *p = elements >= HD_CPU_PARALLEL_ELEMENTS ? pool : NULL;
    if (total != NULL) {
        job.sums = malloc((units > 0 ? units : 1) * sizeof *job.sums);
        if (job.sums == NULL) {
            free(first);
            return HD_ERR_OUT_OF_MEMORY;
        }
        hd__cpu_pool_run(p, units, norm_part, &job);
        double sum = 0.0;
        for (size_t u = 0; u < units; u++)
            sum += job.sums[u];
        free(job.sums);
        *total = (float)sqrt(sum);
        /* in float, as PyTorch forms it; a NaN c stays NaN (clamp propagates it), but a norm
         * only measured must not turn inf / inf into a NaN step */
        float c = max_norm / (*total + 1e-6f);
        job.coef = c > 1.0f || isinf(max_norm) ? 1.0f : c;
    }
    hd__cpu_pool_run(p, units, update_part, &job);
    free(first);
    return HD_OK;
}
