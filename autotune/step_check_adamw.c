/* The tools' check of AdamW (reference.h): one step of every tensor in float64, each element of
 * the parameters and moments within a tolerance from its terms' magnitudes. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autotune/reference.h"
#include "autotune/step_check.h"

/* Units of roundoff an element may be off by: a few float operations on terms of its
 * magnitude; where the clip scales the gradients, their coefficient's error too, which the
 * norm's float sum over every gradient sets (tests/test_train_ops.c bounds it alike). */
#define ADAMW_LIMIT      16.0
#define ADAMW_CLIP_LIMIT 128.0

typedef struct adamw_worst {
    double ratio;
    char *why;
    size_t size;
} adamw_worst;

/* Records element j of list[k] where its error over tolerance is the worst so far. */
static void note(adamw_worst *w, const char *list, size_t k, size_t j, float got, double want,
                 double tol)
{
    double r = isfinite(got) ? hd__ref_error_ratio(fabs((double)got - want), tol) : INFINITY;
    if (!(r > w->ratio))
        return;
    w->ratio = r;
    snprintf(w->why, w->size, "%s[%zu][%zu]: got %.9g, want %.9g (tolerance %.3g)", list, k, j,
             (double)got, want, tol);
}

/* Tensor k after the step against its float64 step (p, m, v: n[k] doubles each). */
static void check_tensor(const hd_ref_adamw_lists *b, const hd_ref_adamw_lists *a, size_t k,
                         const hd_ref_adamw_params *hp, double coef, double limit, const double *p,
                         const double *m, const double *v, adamw_worst *w)
{
    double b1 = hp->beta1, b2 = hp->beta2, t = (double)hp->step;
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    double tol = limit * HD_REF_U;
    for (size_t j = 0; j < b->n[k]; j++) {
        double g = b->g[k][j] * coef;
        double mag_m = fabs(b1 * b->m[k][j]) + fabs((1.0 - b1) * g);
        double mag_v = fabs(b2 * b->v[k][j]) + (1.0 - b2) * g * g;
        double mag_p = fabs(b->p[k][j] * (1.0 - (double)hp->lr * hp->weight_decay)) +
                       hp->lr / bc1 * mag_m / (sqrt(v[j] / bc2) + hp->eps);
        note(w, "params", k, j, a->p[k][j], p[j], tol * mag_p + FLT_MIN);
        note(w, "m", k, j, a->m[k][j], m[j], tol * mag_m + FLT_MIN);
        note(w, "v", k, j, a->v[k][j], v[j], tol * mag_v + FLT_MIN);
    }
}

double hd__ref_check_adamw(const hd_ref_adamw_lists *before, const hd_ref_adamw_params *hp,
                           float max_grad_norm, const hd_ref_adamw_lists *after, char *why,
                           size_t size)
{
    adamw_worst w = {0.0, why, size};
    why[0] = '\0';
    size_t most = 1;
    for (size_t k = 0; k < before->count; k++)
        most = before->n[k] > most ? before->n[k] : most;
    double *p = malloc(3 * most * sizeof *p);
    if (p == NULL) {
        snprintf(why, size, "no reference (out of memory)");
        return INFINITY;
    }
    double *m = p + most, *v = m + most;
    double coef = 1.0;
    if (max_grad_norm > 0.0f)
        coef = hd__ref_clip_coef(hd__ref_grad_norm(before->count, before->g, before->n),
                                 max_grad_norm);
    double limit = coef < 1.0 ? ADAMW_CLIP_LIMIT : ADAMW_LIMIT;
    for (size_t k = 0; k < before->count; k++) {
        hd__ref_adamw(before->n[k], before->p[k], before->g[k], before->m[k], before->v[k], hp,
                      coef, p, m, v);
        check_tensor(before, after, k, hp, coef, limit, p, m, v, &w);
    }
    free(p);
    return w.ratio;
}
