/*
 * Lab harness of multi-tensor AdamW (backends/fused/kernels/adamw.cl, backends/cpu/adamw.c)
 * against the float64 reference (autotune/reference_train.c): sets of 1 to 11 tensors (empty
 * slots among them; more than 8 in two launches with one norm over all), lengths from 1 to 65537
 * (primes, one past a work-group's span), steps 1, 3, 10 and 10^6, weight decay 0 and not,
 * no clip, a clip that scales (coef < 1), one that does not, max_norm = inf, zero gradients
 * and moments, a NaN gradient under the clip (NaN everywhere, as PyTorch); the gradients must
 * come back unchanged; the CPU version at 1, 2 and 3 threads (the same bits required).
 *
 * Tolerances (lab.h: errors in units of u * mag, u = 2^-24), L = the norm's limit below:
 *   total: mag total, limit L = 4 + ELEMS + log2(WG) (a float sum of ELEMS squares per
 *          work-item, a tree over the work-group, the groups' sums added as a pair; its sqrt).
 *   m:     mag |b1 m| + |(1 - b1) g'| (1 + L) (g' = g coef: coef carries the norm's error), limit
 *          4.
 *   v:     mag |b2 v| + |(1 - b2) g'^2| (2 + 2L), limit 4.
 *   p:     mag |p decay| + step_size mag(m) / den + |upd| (8 + 2 + 2L), den = sqrt(v') / sqrt(bc2)
 *          + eps and upd the step's change, limit 4.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference_step.h"
#include "backends/cpu/step.h"
#include "lab.h"

typedef struct config {
    int wg, elems;
} config;

static const config configs[] = {{256, 4}, {64, 1}, {32, 3}};

#define MAX_TENSORS 11
typedef struct tensor_set {
    size_t count;
    size_t n[MAX_TENSORS];
} tensor_set;

static const tensor_set sets[] = {
    {1, {1}},
    {4, {7, 0, 1000, 3}},
    {8, {4096, 12345, 1, 65537, 5, 0, 0, 257}},
    {11, {100, 2000, 3, 0, 777, 4097, 1, 50, 999, 31, 8191}},
};

typedef struct hyper {
    const char *name;
    hd_ref_adamw_params hp;
    bool clip;
    float max_norm;
    double gscale;
    int special; /* 1: zero state and half the gradients zero; 2: a NaN gradient */
} hyper;

static const hyper hypers[] = {
    {"step 1, wd 0.01, no clip", {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1}, false, 0.0f, 1.0, 0},
    {"step 10, clip 1 (scales)", {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 10}, true, 1.0f, 100.0, 0},
    {"step 1e6, wd 0.1, clip 1e6 (none)",
     {2e-4f, 0.9f, 0.95f, 1e-6f, 0.1f, 1000000},
     true,
     1e6f,
     1.0,
     0},
    {"step 3, max_norm inf", {1e-2f, 0.8f, 0.99f, 1e-8f, 0.05f, 3}, true, INFINITY, 0.01, 0},
    {"step 1, zero state and gradients",
     {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1},
     true,
     1.0f,
     1.0,
     1},
    {"step 5, NaN gradient under the clip",
     {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 5},
     true,
     1.0f,
     1.0,
     2},
};

enum { E_TOTAL, E_P, E_M, E_V, E_G_KEPT, E_SAME, E_COUNT };
static lab_err errs[E_COUNT], cpu_errs[E_COUNT];

typedef struct state {
    size_t count, n[MAX_TENSORS];
    float *p[MAX_TENSORS], *g[MAX_TENSORS], *m[MAX_TENSORS], *v[MAX_TENSORS];
} state;

static void state_make(state *s, const tensor_set *ts, const hyper *h)
{
    s->count = ts->count;
    for (size_t k = 0; k < ts->count; k++) {
        size_t n = ts->n[k];
        s->n[k] = n;
        s->p[k] = malloc(n * 4 + 4);
        s->g[k] = malloc(n * 4 + 4);
        s->m[k] = malloc(n * 4 + 4);
        s->v[k] = malloc(n * 4 + 4);
        for (size_t j = 0; j < n; j++) {
            s->p[k][j] = (float)(0.02 * lab_normal());
            s->g[k][j] = (float)(h->gscale * lab_normal());
            s->m[k][j] = (float)(0.1 * h->gscale * lab_normal());
            s->v[k][j] = (float)(0.01 * h->gscale * h->gscale * fabs(lab_normal()));
            if (h->special == 1) {
                s->m[k][j] = s->v[k][j] = 0.0f;
                if (j % 2 == 0)
                    s->g[k][j] = 0.0f;
            }
        }
    }
    if (h->special == 2)
        for (size_t k = 0; k < ts->count; k++)
            if (s->n[k] > 0) {
                s->g[k][s->n[k] / 2] = NAN;
                break;
            }
}

static void state_copy(state *dst, const state *src)
{
    dst->count = src->count;
    for (size_t k = 0; k < src->count; k++) {
        size_t b = src->n[k] * 4 + 4;
        dst->n[k] = src->n[k];
        dst->p[k] = malloc(b);
        dst->g[k] = malloc(b);
        dst->m[k] = malloc(b);
        dst->v[k] = malloc(b);
        memcpy(dst->p[k], src->p[k], b);
        memcpy(dst->g[k], src->g[k], b);
        memcpy(dst->m[k], src->m[k], b);
        memcpy(dst->v[k], src->v[k], b);
    }
}

static void state_free(state *s)
{
    for (size_t k = 0; k < s->count; k++) {
        free(s->p[k]);
        free(s->g[k]);
        free(s->m[k]);
        free(s->v[k]);
    }
}

/* The reference step and the tolerances' magnitudes, for the state before the step. */
typedef struct expect {
    double total, total_limit;
    double *p[MAX_TENSORS], *m[MAX_TENSORS], *v[MAX_TENSORS];
    double *mp[MAX_TENSORS], *mm[MAX_TENSORS], *mv[MAX_TENSORS];
} expect;

static void expect_make(expect *e, const state *s, const hyper *h, const config *c)
{
    e->total = hd__ref_grad_norm(s->count, (const float *const *)s->g, s->n);
    double coef = h->clip ? hd__ref_clip_coef(e->total, h->max_norm) : 1.0;
    e->total_limit = 4.0 + c->elems + log2((double)c->wg);
    double lt = e->total_limit * (h->clip && coef < 1.0);
    double b1 = h->hp.beta1, b2 = h->hp.beta2, t = (double)h->hp.step;
    double step = h->hp.lr / (1.0 - pow(b1, t)), ibc = 1.0 / sqrt(1.0 - pow(b2, t));
    for (size_t k = 0; k < s->count; k++) {
        size_t n = s->n[k], b = n * sizeof(double) + 8;
        e->p[k] = malloc(b);
        e->m[k] = malloc(b);
        e->v[k] = malloc(b);
        e->mp[k] = malloc(b);
        e->mm[k] = malloc(b);
        e->mv[k] = malloc(b);
        hd__ref_adamw(n, s->p[k], s->g[k], s->m[k], s->v[k], &h->hp, coef, e->p[k], e->m[k],
                      e->v[k]);
        for (size_t j = 0; j < n; j++) {
            double g = s->g[k][j] * coef;
            e->mm[k][j] = fabs(b1 * s->m[k][j]) + fabs((1.0 - b1) * g) * (1.0 + lt);
            e->mv[k][j] = fabs(b2 * s->v[k][j]) + fabs((1.0 - b2) * g * g) * (2.0 + 2.0 * lt);
            double den = sqrt(e->v[k][j]) * ibc + h->hp.eps;
            double upd = step * e->m[k][j] / den;
            e->mp[k][j] = fabs(s->p[k][j] * (1.0 - (double)h->hp.lr * h->hp.weight_decay)) +
                          step * e->mm[k][j] / den + fabs(upd) * (10.0 + 2.0 * lt);
        }
    }
}

static void expect_free(expect *e, size_t count)
{
    for (size_t k = 0; k < count; k++) {
        free(e->p[k]);
        free(e->m[k]);
        free(e->v[k]);
        free(e->mp[k]);
        free(e->mm[k]);
        free(e->mv[k]);
    }
}

static void check_state(lab_err *er, const expect *e, const state *got, const state *before,
                        const char *what)
{
    for (size_t k = 0; k < got->count; k++)
        for (size_t j = 0; j < got->n[k]; j++) {
            lab_check(&er[E_P], got->p[k][j], e->p[k][j], e->mp[k][j], 4.0, false,
                      "%s p tensor %zu [%zu]", what, k, j);
            lab_check(&er[E_M], got->m[k][j], e->m[k][j], e->mm[k][j], 4.0, false,
                      "%s m tensor %zu [%zu]", what, k, j);
            lab_check(&er[E_V], got->v[k][j], e->v[k][j], e->mv[k][j], 4.0, false,
                      "%s v tensor %zu [%zu]", what, k, j);
            lab_check(&er[E_G_KEPT], memcmp(&got->g[k][j], &before->g[k][j], 4) == 0 ? 0.0 : 1.0,
                      0.0, 1.0, 0.5, false, "%s g tensor %zu [%zu] changed", what, k, j);
        }
}

/* The step on the device: 8 tensors per launch, the norm's partials of every launch in one
 * buffer, then one finalize, then the updates; returns the norm (NaN without clip). */
static float kernel_case(const config *c, cl_program prog, const hyper *h, state *s)
{
    size_t span = (size_t)c->wg * (size_t)c->elems, count = s->count;
    size_t launches = (count + 7) / 8;
    cl_mem bp[MAX_TENSORS], bg[MAX_TENSORS], bm[MAX_TENSORS], bv[MAX_TENSORS];
    for (size_t k = 0; k < count; k++) {
        bp[k] = lab_buffer(s->n[k] * 4, s->p[k]);
        bg[k] = lab_buffer(s->n[k] * 4, s->g[k]);
        bm[k] = lab_buffer(s->n[k] * 4, s->m[k]);
        bv[k] = lab_buffer(s->n[k] * 4, s->v[k]);
    }
    cl_mem dummy = lab_buffer(4, NULL);
    cl_int8 lens[2], starts[2];
    size_t groups[2], total_groups = 0;
    for (size_t b = 0; b < launches; b++) {
        cl_int first = 0;
        for (int q = 0; q < 8; q++) {
            size_t k = b * 8 + (size_t)q;
            size_t n = k < count ? s->n[k] : 0;
            lens[b].s[q] = (cl_int)n;
            starts[b].s[q] = first;
            first += (cl_int)((n + span - 1) / span);
        }
        groups[b] = (size_t)first;
        total_groups += groups[b];
    }
    hd_adamw_factors f = hd__adamw_factors(h->hp.lr, h->hp.beta1, h->hp.beta2, h->hp.eps,
                                           h->hp.weight_decay, h->hp.step);
    cl_mem partials = lab_buffer(total_groups * 4, NULL), total = lab_buffer(4, NULL);
    if (h->clip) {
        cl_kernel k = lab_kernel(prog, "adamw_grad_sumsq");
        cl_int part0 = 0;
        for (size_t b = 0; b < launches; b++) {
            for (int q = 0; q < 8; q++) {
                size_t t = b * 8 + (size_t)q;
                cl_mem a = t < count ? bg[t] : dummy;
                LAB_ARG(k, q, a);
            }
            LAB_ARG(k, 8, lens[b]);
            LAB_ARG(k, 9, starts[b]);
            LAB_ARG(k, 10, partials);
            LAB_ARG(k, 11, part0);
            lab_launch(k, groups[b], (size_t)c->wg);
            part0 += (cl_int)groups[b];
        }
        clReleaseKernel(k);
        k = lab_kernel(prog, "adamw_grad_norm");
        LAB_ARG(k, 0, partials);
        LAB_ARG(k, 1, part0);
        LAB_ARG(k, 2, total);
        lab_launch(k, 1, (size_t)c->wg);
        clReleaseKernel(k);
    }
    cl_kernel k = lab_kernel(prog, "adamw_update");
    for (size_t b = 0; b < launches; b++) {
        for (int q = 0; q < 8; q++) {
            size_t t = b * 8 + (size_t)q;
            cl_mem bpt = t < count ? bp[t] : dummy;
            LAB_ARG(k, 4 * q, bpt);
            cl_mem bgt = t < count ? bg[t] : dummy;
            LAB_ARG(k, 4 * q + 1, bgt);
            cl_mem bmt = t < count ? bm[t] : dummy;
            LAB_ARG(k, 4 * q + 2, bmt);
            cl_mem bvt = t < count ? bv[t] : dummy;
            LAB_ARG(k, 4 * q + 3, bvt);
        }
        LAB_ARG(k, 32, lens[b]);
        LAB_ARG(k, 33, starts[b]);
        LAB_ARG(k, 34, f.decay);
        LAB_ARG(k, 35, f.beta1);
        LAB_ARG(k, 36, f.one_minus_beta1);
        LAB_ARG(k, 37, f.beta2);
        LAB_ARG(k, 38, f.one_minus_beta2);
        LAB_ARG(k, 39, f.step_size);
        LAB_ARG(k, 40, f.inv_bc2_sqrt);
        LAB_ARG(k, 41, f.eps);
        h->clip ? LAB_ARG(k, 42, total) : lab_arg_null(k, 42);
        float max_norm = h->max_norm;
        LAB_ARG(k, 43, max_norm);
        lab_launch(k, groups[b], (size_t)c->wg);
    }
    clReleaseKernel(k);
    for (size_t t = 0; t < count; t++) {
        lab_read(bp[t], s->n[t] * 4, s->p[t]);
        lab_read(bg[t], s->n[t] * 4, s->g[t]);
        lab_read(bm[t], s->n[t] * 4, s->m[t]);
        lab_read(bv[t], s->n[t] * 4, s->v[t]);
        clReleaseMemObject(bp[t]);
        clReleaseMemObject(bg[t]);
        clReleaseMemObject(bm[t]);
        clReleaseMemObject(bv[t]);
    }
    float got = NAN;
    if (h->clip)
        lab_read(total, 4, &got);
    clReleaseMemObject(partials);
    clReleaseMemObject(total);
    clReleaseMemObject(dummy);
    return got;
}

static void same_bits(const state *a, const state *b, const char *what)
{
    for (size_t k = 0; k < a->count; k++)
        for (size_t j = 0; j < a->n[k]; j++) {
            bool same = memcmp(&a->p[k][j], &b->p[k][j], 4) == 0 &&
                        memcmp(&a->m[k][j], &b->m[k][j], 4) == 0 &&
                        memcmp(&a->v[k][j], &b->v[k][j], 4) == 0;
            lab_check(&cpu_errs[E_SAME], same ? 0.0 : 1.0, 0.0, 1.0, 0.5, false,
                      "%s tensor %zu [%zu]", what, k, j);
        }
}

static void cpu_case(hd_cpu_pool *const pools[3], const hyper *h, const state *before,
                     const expect *e)
{
    state s[3];
    float total[3] = {0.0f, 0.0f, 0.0f};
    hd_adamw_factors f = hd__adamw_factors(h->hp.lr, h->hp.beta1, h->hp.beta2, h->hp.eps,
                                           h->hp.weight_decay, h->hp.step);
    for (int q = 0; q < 3; q++) {
        state_copy(&s[q], before);
        hd_adamw_tensor t[MAX_TENSORS];
        for (size_t k = 0; k < before->count; k++)
            t[k] = (hd_adamw_tensor){s[q].p[k], s[q].g[k], s[q].m[k], s[q].v[k], s[q].n[k]};
        if (hd__cpu_adamw(pools[q], t, before->count, &f, h->max_norm,
                          h->clip ? &total[q] : NULL) != HD_OK)
            exit(2);
    }
    check_state(cpu_errs, e, &s[0], before, "cpu");
    if (h->clip)
        lab_check(&cpu_errs[E_TOTAL], total[0], e->total, e->total, e->total_limit, false,
                  "cpu total");
    for (int q = 1; q < 3; q++) {
        same_bits(&s[0], &s[q], "cpu threads");
        lab_check(&cpu_errs[E_SAME], memcmp(&total[0], &total[q], 4) == 0 ? 0.0 : 1.0, 0.0, 1.0,
                  0.5, false, "cpu total, threads");
    }
    for (int q = 0; q < 3; q++)
        state_free(&s[q]);
}

int main(void)
{
    lab_init();
    static const char *const names[E_COUNT] = {"total norm",           "p", "m", "v", "g unchanged",
                                               "cpu threads same bits"};
    for (int e = 0; e < E_COUNT; e++) {
        lab_err_start(&errs[e], names[e]);
        lab_err_start(&cpu_errs[e], names[e]);
    }
    hd_cpu_pool *pools[3] = {NULL, NULL, NULL};
    hd__cpu_pool_create(2, &pools[1]);
    hd__cpu_pool_create(3, &pools[2]);
    uint64_t seed = 1;
    for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
        const config *c = &configs[ci];
        char opt[128];
        snprintf(opt, sizeof opt, "-DWG=%d -DROWS=1 -DELEMS=%d", c->wg, c->elems);
        cl_program prog = lab_build("adamw", opt);
        for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++)
            for (size_t hi = 0; hi < sizeof hypers / sizeof hypers[0]; hi++) {
                const hyper *h = &hypers[hi];
                lab_seed(seed++);
                snprintf(lab_case, sizeof lab_case, "wg %d elems %d, set %zu (%zu tensors), %s",
                         c->wg, c->elems, si, sets[si].count, h->name);
                state before, s;
                state_make(&before, &sets[si], h);
                state_copy(&s, &before);
                expect e;
                expect_make(&e, &before, h, c);
                float total = kernel_case(c, prog, h, &s);
                check_state(errs, &e, &s, &before, "kernel");
                if (h->clip)
                    lab_check(&errs[E_TOTAL], total, e.total, e.total, e.total_limit, false,
                              "kernel total");
                if (ci == 0)
                    cpu_case(pools, h, &before, &e);
                expect_free(&e, before.count);
                state_free(&s);
                state_free(&before);
            }
        clReleaseProgram(prog);
    }
    printf("adamw (OpenCL):\n");
    for (int e = 0; e < E_SAME; e++)
        lab_err_report(&errs[e]);
    printf("adamw (CPU, 1/2/3 threads):\n");
    for (int e = 0; e < E_COUNT; e++)
        lab_err_report(&cpu_errs[e]);
    hd__cpu_pool_destroy(pools[1]);
    hd__cpu_pool_destroy(pools[2]);
    lab_finish();
    return lab_summary();
}
