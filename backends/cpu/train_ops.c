/* The CPU backend's slots of residual add + RMS norm, cross-entropy and AdamW: arguments from
 * hd_step_args and hd_adamw_args (core/args.h) into the functions of add_rms_norm.c,
 * cross_entropy.c and adamw.c, on the host copies the dispatcher made valid. */
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/step.h"
#include "core/error.h"

static hd_cpu_pool *pool_of(void *state)
{
    return ((hd_cpu_state *)state)->pool;
}

static float *host(const hd_tensor *t)
{
    return t->state->host;
}

static float *host_or_null(const hd_tensor *t)
{
    return t != NULL ? t->state->host : NULL;
}

/* in: x, r, weight; out: h, y. */
hd_status hd__cpu_add_rms_norm_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    (void)ctx;
    const hd_step_args *a = &args->step;
    hd__cpu_add_rms_norm(pool_of(state), a->rows, a->cols, host(a->in[0]), host(a->in[1]),
                         host(a->in[2]), a->eps, host(a->out[0]), host(a->out[1]));
    return HD_OK;
}

/* in: h, weight, dy, dres (may be NULL); out: dh, dweight (may be NULL). */
hd_status hd__cpu_add_rms_norm_backward_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    const hd_step_args *a = &args->step;
    hd_status s = hd__cpu_add_rms_norm_backward(
        pool_of(state), a->rows, a->cols, host(a->in[0]), host(a->in[1]), host(a->in[2]),
        host_or_null(a->in[3]), a->eps, host(a->out[0]), host_or_null(a->out[1]));
    if (s != HD_OK)
        return hd__error(ctx, s, "hd_add_rms_norm_backward: statistics of %zu rows", a->rows);
    return HD_OK;
}

/* 1 / the rows counted: infinite when none is, which makes the mean of no loss 0 * inf = NaN,
 * as PyTorch's, while every ignored row's gradient stays 0. */
float hd__cpu_inv_count(size_t counted)
{
    return (float)(1.0 / (double)counted);
}

/* in: logits; out: loss, dlogits (may be NULL, may be logits). */
hd_status hd__cpu_cross_entropy_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    const hd_step_args *a = &args->step;
    float *losses = malloc(a->rows * sizeof *losses);
    if (losses == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "hd_cross_entropy: losses of %zu rows",
                         a->rows);
    hd__cpu_cross_entropy(pool_of(state), a->rows, a->vocab, host(a->in[0]), a->ids,
                          a->ignore_index, hd__cpu_inv_count(a->counted), losses, NULL,
                          host_or_null(a->out[1]), host(a->out[0]));
    free(losses);
    return HD_OK;
}

/* The step's tensors as hd__cpu_adamw takes them. */
static void adamw_tensors(const hd_adamw_args *a, hd_adamw_tensor *t)
{
    for (size_t k = 0; k < a->count; k++)
        t[k] = (hd_adamw_tensor){host(a->params[k]), host(a->grads[k]), host(a->m[k]),
                                 host(a->v[k]), hd__tensor_count(a->params[k])};
}

/* The norm is measured where it clips or where the caller wants it; measured alone it clips
 * nothing (max_norm infinite). */
hd_status hd__cpu_adamw_slot(void *state, hd_context *ctx, const hd_adamw_args *a)
{
    hd_adamw_tensor *t = malloc((a->count > 0 ? a->count : 1) * sizeof *t);
    if (t == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "hd_adamw: a table of %zu tensors", a->count);
    adamw_tensors(a, t);
    hd_adamw_factors f =
        hd__adamw_factors(a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->step);
    bool measure = a->max_grad_norm > 0.0f || a->grad_norm != NULL;
    float total = 0.0f, max_norm = a->max_grad_norm > 0.0f ? a->max_grad_norm : INFINITY;
    hd_status s = hd__cpu_adamw(pool_of(state), t, a->count, &f, max_norm, measure ? &total : NULL);
    free(t);
    if (s != HD_OK)
        return hd__error(ctx, s, "hd_adamw: the norm's partial sums of %zu tensors", a->count);
    if (a->grad_norm != NULL)
        host(a->grad_norm)[0] = total;
    return HD_OK;
}
