/*
 * AdamW through the dispatcher (hd_adamw). It is not an op of the table: it takes any number of
 * tensors, so it has its own checks and its own path, the same in spirit as an op's (ops.c):
 * every argument checked before anything is touched; run where the tensors are (a device
 * backend with an AdamW slot where the first parameter is valid on the device, else the
 * host's); the tensors made valid there and recorded as written; a device that fails before
 * it wrote anything hands the step to the host, with a note.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "dispatch/context.h"
#include "dispatch/profile.h"
#include "dispatch/fault.h"
#include "dispatch/tensor.h"
#include "dispatch/tools.h"

/* The four lists of a call, in the order of hd_adamw's parameters. */
enum { LIST_PARAMS, LIST_GRADS, LIST_M, LIST_V, LIST_COUNT };
static const char *const list_names[LIST_COUNT] = {"params", "grads", "m", "v"};

typedef struct adamw_lists {
    const hd_tensor *const *list[LIST_COUNT];
    size_t count;
} adamw_lists;

static hd_status invalid(hd_context *ctx, const char *what, double got)
{
    return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "hd_adamw: %s, got %g", what, got);
}

/* PyTorch's ranges, made finite: a step of an infinite rate or norm is no step. */
static hd_status check_hyperparameters(hd_context *ctx, const hd_adamw_options *o)
{
    if (!(isfinite(o->lr) && o->lr >= 0.0f))
        return invalid(ctx, "lr must be finite and >= 0", (double)o->lr);
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f))
        return invalid(ctx, "beta1 must be in [0, 1)", (double)o->beta1);
    if (!(o->beta2 >= 0.0f && o->beta2 < 1.0f))
        return invalid(ctx, "beta2 must be in [0, 1)", (double)o->beta2);
    if (!(isfinite(o->eps) && o->eps > 0.0f))
        return invalid(ctx, "eps must be finite and > 0", (double)o->eps);
    if (!(isfinite(o->weight_decay) && o->weight_decay >= 0.0f))
        return invalid(ctx, "weight_decay must be finite and >= 0", (double)o->weight_decay);
    if (o->step < 1)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "hd_adamw: step must be >= 1 (1 for the first step), got %ld", o->step);
    if (!(isfinite(o->max_grad_norm) && o->max_grad_norm >= 0.0f))
        return invalid(ctx, "max_grad_norm must be finite and >= 0 (0: no clipping)",
                       (double)o->max_grad_norm);
    return HD_OK;
}

static hd_status check_tensor(hd_context *ctx, const hd_tensor *t, int list, size_t i)
{
    if (t == NULL)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "hd_adamw: %s[%zu] is NULL",
                         list_names[list], i);
    if (t->ctx != ctx)
        return hd__error(ctx, HD_ERR_WRONG_CONTEXT,
                         "hd_adamw: %s[%zu] was created in another context", list_names[list], i);
    if (t->dtype != HD_DTYPE_FP32)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "hd_adamw: %s[%zu] holds %s, not floats",
                         list_names[list], i, hd__dtype_holds(t->dtype));
    return HD_OK;
}

/* Every tensor present and of ctx; grads[i], m[i] and v[i] of params[i]'s shape. */
static hd_status check_shapes(hd_context *ctx, const adamw_lists *l)
{
    for (size_t i = 0; i < l->count; i++) {
        for (int k = 0; k < LIST_COUNT; k++) {
            hd_status s = check_tensor(ctx, l->list[k][i], k, i);
            if (s != HD_OK)
                return s;
        }
        const hd_tensor *p = l->list[LIST_PARAMS][i];
        for (int k = LIST_GRADS; k < LIST_COUNT; k++) {
            const hd_tensor *t = l->list[k][i];
            if (t->rows != p->rows || t->cols != p->cols)
                return hd__error(ctx, HD_ERR_SHAPE_MISMATCH,
                                 "hd_adamw: %s[%zu] is %zu x %zu, params[%zu] %zu x %zu",
                                 list_names[k], i, t->rows, t->cols, i, p->rows, p->cols);
        }
    }
    return HD_OK;
}

static hd_status check_grad_norm(hd_context *ctx, const hd_tensor *t)
{
    if (t == NULL)
        return HD_OK;
    if (t->ctx != ctx)
        return hd__error(ctx, HD_ERR_WRONG_CONTEXT,
                         "hd_adamw: grad_norm was created in another context");
    if (t->dtype != HD_DTYPE_FP32)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "hd_adamw: grad_norm holds %s, not floats",
                         hd__dtype_holds(t->dtype));
    if (t->rows != 1 || t->cols != 1)
        return hd__error(ctx, HD_ERR_SHAPE_MISMATCH, "hd_adamw: grad_norm is %zu x %zu, not 1 x 1",
                         t->rows, t->cols);
    return HD_OK;
}

/* One tensor of the call where it appears: a list and an index (LIST_COUNT: grad_norm). */
typedef struct appearance {
    const hd_tensor *t;
    int list;
    size_t index;
} appearance;

static int by_tensor(const void *pa, const void *pb)
{
    const appearance *a = pa, *b = pb;
    uintptr_t x = (uintptr_t)a->t, y = (uintptr_t)b->t;
    if (x != y)
        return x < y ? -1 : 1;
    if (a->list != b->list)
        return a->list < b->list ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

static const char *appearance_name(const appearance *a, char *buf, size_t size)
{
    if (a->list == LIST_COUNT)
        return "grad_norm";
    snprintf(buf, size, "%s[%zu]", list_names[a->list], a->index);
    return buf;
}

/* No tensor twice among the lists and grad_norm: each appearance sorted by tensor, so that a
 * call of many tensors is checked in n log n. */
static hd_status check_distinct(hd_context *ctx, const adamw_lists *l, const hd_tensor *grad_norm)
{
    size_t n = LIST_COUNT * l->count + (grad_norm != NULL);
    if (n < 2)
        return HD_OK;
    if (l->count > SIZE_MAX / sizeof(appearance) / (LIST_COUNT + 1))
        return hd__error(ctx, HD_ERR_SIZE_OVERFLOW, "hd_adamw: %zu tensors", l->count);
    appearance *all = malloc(n * sizeof *all);
    if (all == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "hd_adamw: checking %zu tensors", n);
    size_t at = 0;
    for (int k = 0; k < LIST_COUNT; k++)
        for (size_t i = 0; i < l->count; i++)
            all[at++] = (appearance){l->list[k][i], k, i};
    if (grad_norm != NULL)
        all[at++] = (appearance){grad_norm, LIST_COUNT, 0};
    qsort(all, n, sizeof *all, by_tensor);
    hd_status s = HD_OK;
    for (size_t i = 1; i < n && s == HD_OK; i++) {
        if (all[i].t != all[i - 1].t)
            continue;
        char first[48], second[48];
        s = hd__error(ctx, HD_ERR_ALIASING, "hd_adamw: %s is also %s",
                      appearance_name(&all[i], second, sizeof second),
                      appearance_name(&all[i - 1], first, sizeof first));
    }
    free(all);
    return s;
}

static hd_status check_call(hd_context *ctx, const hd_adamw_options *opt, const adamw_lists *l)
{
    if (opt == NULL)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "hd_adamw: options are NULL");
    for (int k = 0; k < LIST_COUNT; k++)
        if (l->count > 0 && l->list[k] == NULL)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "hd_adamw: %zu tensors but the array %s is NULL", l->count,
                             list_names[k]);
    hd_status s = check_hyperparameters(ctx, opt);
    if (s == HD_OK)
        s = check_shapes(ctx, l);
    if (s == HD_OK)
        s = check_grad_norm(ctx, opt->grad_norm);
    if (s == HD_OK)
        s = check_distinct(ctx, l, opt->grad_norm);
    return s;
}

bool hd__backend_runs_adamw(const hd_context *ctx, hd_backend b)
{
    return hd__backend_usable(ctx, b) && ctx->composite[b] == NULL && ctx->backends[b] != NULL &&
           ctx->backends[b]->adamw != NULL;
}

/* The first usable backend in the registry's order with an AdamW slot at place;
 * HD_BACKEND_AUTO where there is none. */
static hd_backend adamw_backend(const hd_context *ctx, hd_place place)
{
    size_t n;
    const hd_backend *order = hd__registry_order(&n);
    for (size_t i = 0; i < n; i++)
        if (hd__backend_runs_adamw(ctx, order[i]) && ctx->backends[order[i]]->place == place)
            return order[i];
    return HD_BACKEND_AUTO;
}

/* Every tensor valid at place: the parameters, gradients and moments read, grad_norm only
 * written. */
static hd_status place_tensors(const hd_adamw_args *a, hd_place place)
{
    hd_status s = HD_OK;
    for (size_t i = 0; i < a->count && s == HD_OK; i++) {
        const hd_tensor *t[] = {a->params[i], a->grads[i], a->m[i], a->v[i]};
        for (int k = 0; k < LIST_COUNT && s == HD_OK; k++)
            s = hd__tensor_to_place(t[k], place);
    }
    if (s == HD_OK && a->grad_norm != NULL)
        s = hd__tensor_reserve(a->grad_norm, place);
    return s;
}

static void record_written(const hd_adamw_args *a, hd_place place)
{
    for (size_t i = 0; i < a->count; i++) {
        hd__tensor_written(a->params[i], place);
        hd__tensor_written(a->m[i], place);
        hd__tensor_written(a->v[i], place);
    }
    if (a->grad_norm != NULL)
        hd__tensor_written(a->grad_norm, place);
}

/* The step on backend b: tensors made valid at its place, its slot, the outputs recorded as
 * written there (also after a failure that wrote them: that place holds the latest). */
static hd_status run_on(hd_context *ctx, hd_backend b, const hd_adamw_args *a)
{
    hd_place place = ctx->backends[b]->place;
    if (hd__fault(ctx, b, "migrate"))
        return HD_ERR_DEVICE;
    hd_status s = place_tensors(a, place);
    if (s == HD_OK && hd__fault(ctx, b, "launch"))
        s = HD_ERR_DEVICE;
    ctx->report.outputs_changed = false;
    if (s == HD_OK)
        s = ctx->backends[b]->adamw(ctx->backend_state[b], ctx, a);
    if (s == HD_OK || ctx->report.outputs_changed)
        record_written(a, place);
    if (s == HD_OK)
        ctx->last_backend = b;
    return s;
}

/* After the device backend failed with status s: the host's turn where nothing was written
 * (AdamW updates in place: a step half taken cannot be taken again). */
static hd_status fall_back(hd_context *ctx, hd_backend failed, hd_backend host,
                           const hd_adamw_args *a, hd_status s)
{
    char cause[640]; /* the message is rewritten in place: its cause copied first */
    snprintf(cause, sizeof cause, "%.600s", ctx->report.last_error);
    if (s == HD_ERR_DEVICE)
        hd__backend_mark_unhealthy(ctx, failed);
    if (ctx->report.outputs_changed)
        return hd__error(ctx, s,
                         "adamw failed on %s after it had begun writing the parameters and "
                         "moments, which are undefined now (no other backend ran): %s",
                         hd_backend_name(failed), cause);
    if (host == HD_BACKEND_AUTO)
        return hd__error(ctx, s, "adamw failed on %s: %s", hd_backend_name(failed), cause);
    hd_status h = run_on(ctx, host, a);
    if (h != HD_OK) {
        char then[640];
        snprintf(then, sizeof then, "%.600s", ctx->report.last_error);
        return hd__error(ctx, h, "adamw failed on %s (%s), then on %s: %s", hd_backend_name(failed),
                         cause, hd_backend_name(host), then);
    }
    hd__note(ctx, "adamw ran on %s after: [%s] %s", hd_backend_name(host), hd_backend_name(failed),
             cause);
    hd__error_clear(ctx);
    return HD_OK;
}

static hd_adamw_args adamw_args(const hd_adamw_options *o, size_t count, hd_tensor *const params[],
                                const hd_tensor *const grads[], hd_tensor *const m[],
                                hd_tensor *const v[])
{
    return (hd_adamw_args){.params = params,
                           .grads = grads,
                           .m = m,
                           .v = v,
                           .count = count,
                           .lr = o->lr,
                           .beta1 = o->beta1,
                           .beta2 = o->beta2,
                           .eps = o->eps,
                           .weight_decay = o->weight_decay,
                           .step = (int64_t)o->step,
                           .max_grad_norm = o->max_grad_norm,
                           .grad_norm = o->grad_norm};
}

/* On the device where the context has one that runs AdamW and the first parameter is valid
 * there (falling back to the host), else on the host. */
static hd_status run_where_the_tensors_are(hd_context *ctx, const hd_adamw_args *a,
                                           bool on_device)
{
    hd_backend host = adamw_backend(ctx, HD_PLACE_HOST);
    hd_backend device = adamw_backend(ctx, HD_PLACE_DEVICE);
    if (device != HD_BACKEND_AUTO && on_device) {
        hd_status s = run_on(ctx, device, a);
        return s == HD_OK ? HD_OK : fall_back(ctx, device, host, a, s);
    }
    if (host == HD_BACKEND_AUTO)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "no backend of this context runs adamw");
    return run_on(ctx, host, a);
}

hd_status hd_adamw(hd_context *ctx, const hd_adamw_options *opt, size_t count,
                   hd_tensor *const params[], const hd_tensor *const grads[], hd_tensor *const m[],
                   hd_tensor *const v[])
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    const adamw_lists lists = {{(const hd_tensor *const *)params, grads,
                                (const hd_tensor *const *)m, (const hd_tensor *const *)v},
                               count};
    hd_status s = check_call(ctx, opt, &lists);
    if (s != HD_OK)
        return s;
    const hd_adamw_args a = adamw_args(opt, count, params, grads, m, v);
    double begin = hd__profile_begin(ctx);
    s = run_where_the_tensors_are(ctx, &a, count > 0 && params[0]->state->device_valid);
    hd__profile_end(ctx, HD_PROFILE_ADAMW, NULL, begin, s);
    return s;
}
