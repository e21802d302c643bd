/*
 * AdamW over many tensors on the device (kernels/adamw.cl): the tensors in batches of up to
 * eight, one launch each. With the norm measured (clipping, or grad_norm wanted): each batch's
 * sums of squares into one partials buffer, the norm from all of them in one work-group (into
 * grad_norm, or a scratch float), then the updates, which read it where they clip. Every
 * kernel is built and every buffer taken before the first launch; the parameters are written
 * by the updates alone, so a failure before the first of them leaves the step for the host.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/fused/internal.h"

#define ADAMW_SLOTS 8 /* tensors per launch: the kernels' eight slots */
/* Work-items per group and elements per work-item (adamw.cl's WG and ELEMS defaults). */
#define ADAMW_WG    256
#define ADAMW_ELEMS 4

/* An int8 argument of the kernels (OpenCL C's vector of eight ints: 32 bytes, so aligned). */
typedef struct adamw_int8 {
    _Alignas(32) int32_t s[ADAMW_SLOTS];
} adamw_int8;

/* One launch's tensors: lens and the first work-group of each (unused slots empty, starting
 * where the groups end). */
typedef struct adamw_batch {
    size_t first, count;
    adamw_int8 lens, starts;
    size_t groups;
} adamw_batch;

typedef struct adamw_plan {
    size_t wg, span; /* span: elements per work-group */
    size_t batch_count, partials;
    adamw_batch *batches;
    hd_kernel *sumsq, *norm, *update;
    struct hd_device_buffer *part, *total_scratch;
} adamw_plan;

static size_t ceil_div(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* The batches' lens, starts and groups; HD_ERR_UNSUPPORTED where a tensor or a launch passes
 * the kernels' int indices. */
static hd_status plan_batches(hd_context *ctx, const hd_adamw_args *a, adamw_plan *pl)
{
    pl->partials = 0;
    for (size_t b = 0; b < pl->batch_count; b++) {
        adamw_batch *bt = &pl->batches[b];
        bt->first = b * ADAMW_SLOTS;
        bt->count = a->count - bt->first < ADAMW_SLOTS ? a->count - bt->first : ADAMW_SLOTS;
        size_t groups = 0;
        for (size_t k = 0; k < ADAMW_SLOTS; k++) {
            size_t n = k < bt->count ? hd__tensor_count(a->params[bt->first + k]) : 0;
            if (n > (size_t)INT_MAX - pl->span || groups > (size_t)INT_MAX - ceil_div(n, pl->span))
                return hd__error(ctx, HD_ERR_UNSUPPORTED,
                                 "fused: adamw's tensor %zu of %zu elements passes the kernels' "
                                 "int indices",
                                 bt->first + k, n);
            bt->lens.s[k] = (int32_t)n;
            bt->starts.s[k] = (int32_t)groups;
            groups += ceil_div(n, pl->span);
        }
        bt->groups = groups;
        if (pl->partials > (size_t)INT_MAX - groups)
            return hd__error(ctx, HD_ERR_UNSUPPORTED, "fused: adamw's %zu tensors are too many",
                             a->count);
        pl->partials += groups;
    }
    return HD_OK;
}

static hd_status build_kernels(hd_fused *f, hd_context *ctx, bool measure, adamw_plan *pl)
{
    char options[HD_FUSED_OPTIONS_CAPACITY];
    snprintf(options, sizeof options, "-DWG=%zu -DROWS=1 -DELEMS=%d", pl->wg, ADAMW_ELEMS);
    hd_status s =
        hd__fused_kernel(f, ctx, HD_FUSED_ADAMW, options, "adamw_update", pl->wg, &pl->update);
    if (s == HD_OK && measure)
        s = hd__fused_kernel(f, ctx, HD_FUSED_ADAMW, options, "adamw_grad_sumsq", pl->wg,
                             &pl->sumsq);
    if (s == HD_OK && measure)
        s = hd__fused_kernel(f, ctx, HD_FUSED_ADAMW, options, "adamw_grad_norm", pl->wg, &pl->norm);
    return s;
}

/* Everything that can refuse the step: the batches, the kernels, the partials and the norm's
 * scratch where no grad_norm receives it. */
static hd_status prepare(hd_fused *f, hd_context *ctx, const hd_adamw_args *a, bool measure,
                         adamw_plan *pl)
{
    pl->wg = ADAMW_WG;
    while (pl->wg > f->device_max_group) /* the norm's tree takes a power of two */
        pl->wg /= 2;
    pl->span = pl->wg * ADAMW_ELEMS;
    pl->batch_count = ceil_div(a->count, ADAMW_SLOTS);
    pl->batches = malloc((pl->batch_count > 0 ? pl->batch_count : 1) * sizeof *pl->batches);
    if (pl->batches == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "fused: adamw's batches of %zu tensors",
                         a->count);
    hd_status s = plan_batches(ctx, a, pl);
    if (s == HD_OK)
        s = build_kernels(f, ctx, measure, pl);
    if (s == HD_OK && measure)
        s = hd__fused_buffer(f, ctx, pl->partials * sizeof(float), &pl->part);
    if (s == HD_OK && measure && a->grad_norm == NULL)
        s = hd__fused_buffer(f, ctx, sizeof(float), &pl->total_scratch);
    return s;
}

/* The device buffer of list[first + k], or of list[first] for an unused slot (any valid
 * buffer: its length is 0). */
static const struct hd_device_buffer *slot_buffer(const hd_tensor *const *list,
                                                  const adamw_batch *bt, size_t k)
{
    return list[bt->first + (k < bt->count ? k : 0)]->state->device;
}

static hd_status launch_sumsq(hd_fused *f, hd_context *ctx, const hd_adamw_args *a,
                              const adamw_plan *pl, adamw_batch *bt, int32_t part0)
{
    hd_fused_arg list[ADAMW_SLOTS + 4];
    for (size_t k = 0; k < ADAMW_SLOTS; k++)
        list[k] = HD_FUSED_BUFFER(slot_buffer(a->grads, bt, k));
    list[ADAMW_SLOTS] = HD_FUSED_VALUE(bt->lens);
    list[ADAMW_SLOTS + 1] = HD_FUSED_VALUE(bt->starts);
    list[ADAMW_SLOTS + 2] = HD_FUSED_BUFFER(pl->part);
    list[ADAMW_SLOTS + 3] = HD_FUSED_VALUE(part0);
    return hd__fused_launch_args(f, ctx, pl->sumsq, bt->groups, pl->wg, list, ADAMW_SLOTS + 4);
}

/* total = the 2-norm of every gradient: each batch's sums of squares, then their sum. */
static hd_status launch_norm(hd_fused *f, hd_context *ctx, const hd_adamw_args *a,
                             const adamw_plan *pl, const struct hd_device_buffer *total)
{
    hd_status s = HD_OK;
    size_t part0 = 0;
    for (size_t b = 0; b < pl->batch_count && s == HD_OK; b++) {
        if (pl->batches[b].groups > 0)
            s = launch_sumsq(f, ctx, a, pl, &pl->batches[b], (int32_t)part0);
        part0 += pl->batches[b].groups;
    }
    int32_t count = (int32_t)pl->partials;
    const hd_fused_arg list[] = {HD_FUSED_BUFFER(pl->part), HD_FUSED_VALUE(count),
                                 HD_FUSED_BUFFER(total)};
    return s == HD_OK ? hd__fused_launch_args(f, ctx, pl->norm, 1, pl->wg, list, 3) : s;
}

/* The update's scalar arguments, which outlive each launch. */
typedef struct update_scalars {
    hd_adamw_factors f;
    float max_norm;
} update_scalars;

enum { UPDATE_ARGS = 4 * ADAMW_SLOTS + 12 };

static hd_status launch_update(hd_fused *f, hd_context *ctx, const hd_adamw_args *a,
                               const adamw_plan *pl, adamw_batch *bt, update_scalars *u,
                               const struct hd_device_buffer *total)
{
    hd_fused_arg list[UPDATE_ARGS];
    int n = 0;
    for (size_t k = 0; k < ADAMW_SLOTS; k++) {
        list[n++] = HD_FUSED_BUFFER(slot_buffer((const hd_tensor *const *)a->params, bt, k));
        list[n++] = HD_FUSED_BUFFER(slot_buffer(a->grads, bt, k));
        list[n++] = HD_FUSED_BUFFER(slot_buffer((const hd_tensor *const *)a->m, bt, k));
        list[n++] = HD_FUSED_BUFFER(slot_buffer((const hd_tensor *const *)a->v, bt, k));
    }
    list[n++] = HD_FUSED_VALUE(bt->lens);
    list[n++] = HD_FUSED_VALUE(bt->starts);
    list[n++] = HD_FUSED_VALUE(u->f.decay);
    list[n++] = HD_FUSED_VALUE(u->f.beta1);
    list[n++] = HD_FUSED_VALUE(u->f.one_minus_beta1);
    list[n++] = HD_FUSED_VALUE(u->f.beta2);
    list[n++] = HD_FUSED_VALUE(u->f.one_minus_beta2);
    list[n++] = HD_FUSED_VALUE(u->f.step_size);
    list[n++] = HD_FUSED_VALUE(u->f.inv_bc2_sqrt);
    list[n++] = HD_FUSED_VALUE(u->f.eps);
    list[n++] = HD_FUSED_BUFFER(total);
    list[n++] = HD_FUSED_VALUE(u->max_norm);
    return hd__fused_launch_args(f, ctx, pl->update, bt->groups, pl->wg, list, n);
}

/* The updates, batch by batch; total NULL: no clip. */
static hd_status launch_updates(hd_fused *f, hd_context *ctx, const hd_adamw_args *a,
                                const adamw_plan *pl, const struct hd_device_buffer *total)
{
    update_scalars u = {
        hd__adamw_factors(a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->step),
        a->max_grad_norm};
    hd_status s = HD_OK;
    bool wrote = false;
    for (size_t b = 0; b < pl->batch_count && s == HD_OK; b++) {
        if (pl->batches[b].groups == 0)
            continue;
        s = launch_update(f, ctx, a, pl, &pl->batches[b], &u, total);
        wrote = wrote || s == HD_OK;
    }
    if (s != HD_OK && wrote)
        hd__error_outputs_changed(ctx); /* the parameters of the batches before are stepped */
    return s;
}

hd_status hd__fused_adamw(void *state, hd_context *ctx, const hd_adamw_args *a)
{
    hd_fused *f = state;
    bool clip = a->max_grad_norm > 0.0f, measure = clip || a->grad_norm != NULL;
    adamw_plan pl = {0};
    hd_status s = prepare(f, ctx, a, measure, &pl);
    const struct hd_device_buffer *total =
        a->grad_norm != NULL ? a->grad_norm->state->device : pl.total_scratch;
    if (s == HD_OK && measure)
        s = launch_norm(f, ctx, a, &pl, total);
    if (s == HD_OK)
        s = launch_updates(f, ctx, a, &pl, clip ? total : NULL);
    hd__fused_buffer_release(f, pl.part);
    hd__fused_buffer_release(f, pl.total_scratch);
    free(pl.batches);
    return s;
}
