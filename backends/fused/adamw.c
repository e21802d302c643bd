/*
 * AdamW over many tensors on the device (kernels/adamw.cl): the tensors in batches of as many
 * as a launch's parameters hold (SLOTS: 32, 16 or 8), one launch each. With the norm measured
 * (clipping, or grad_norm wanted): each batch's sums of squares into one partials buffer, the
 * last work-group of them adding them into the norm (into grad_norm, or a scratch float), then
 * the updates (adamw_update_after_norm), which read it where they clip and load their tensors
 * before waiting for the launch before them: as dependent launches (the CUDA runtime on
 * compute capability 9.0 on) those loads overlap the end of the norm. Where the tensors fit
 * one launch and the runtime runs a launch's groups all at once (the CUDA runtime's
 * cooperative launches), the norm and the update are one launch instead (adamw_resident),
 * which reads each gradient once where the groups' registers hold them all: always where
 * launches cannot depend so, else only where its groups hold every gradient.
 * Every kernel is built and every buffer taken before the first launch; the parameters are
 * written by the updates alone, so a failure before the first of them leaves the step for the
 * host.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/fused/internal.h"

#define ADAMW_SLOTS_MAX 32 /* tensors per launch at most: adamw.cl's largest SLOTS */
/* Work-items per group and elements per work-item (adamw.cl's WG and ELEMS defaults), and the
 * spans of g that the one-launch kernel holds per work-item (HOLD): on the H200 spans of 4
 * elements, or 4 held, took more time. */
#define ADAMW_WG            256
#define ADAMW_ELEMS         8
#define ADAMW_RESIDENT_HOLD 2
/* The update's arguments: per slot 4 buffers and 2 ints; after them, at most (adamw_resident's)
 * 2 ints, 9 floats and 4 buffers. */
#define UPDATE_SLOT_BYTES  (4 * sizeof(hd_devmem) + 2 * sizeof(int32_t))
#define UPDATE_FIXED_BYTES (2 * sizeof(int32_t) + 9 * sizeof(float) + 4 * sizeof(hd_devmem))

/* One launch's tensors: lens and the first work-group of each (unused slots empty, starting
 * where the groups end). */
typedef struct adamw_batch {
    size_t first, count;
    int32_t lens[ADAMW_SLOTS_MAX], starts[ADAMW_SLOTS_MAX];
    size_t groups;
} adamw_batch;

typedef struct adamw_plan {
    size_t wg, span; /* span: elements per work-group */
    size_t slots;    /* tensors per launch */
    size_t batch_count, partials;
    adamw_batch *batches;
    hd_kernel *norm, *update;
    hd_kernel *resident;    /* the one-launch kernel, where it runs here; else NULL */
    size_t resident_groups; /* its work-groups: as many as run at once, at most one a span */
    struct hd_device_buffer *part, *total_scratch;
    hd_devmem count, flag;
} adamw_plan;

static size_t ceil_div(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* The most tensors a launch takes: the largest of adamw.cl's SLOTS whose update arguments fit
 * the device's parameter space (OpenCL guarantees 1 KiB: 16; NVIDIA's 4 KiB: 32). */
static size_t slots_for(const hd_fused *f)
{
    size_t slots = ADAMW_SLOTS_MAX;
    while (slots > 8 && slots * UPDATE_SLOT_BYTES + UPDATE_FIXED_BYTES > f->param_bytes)
        slots /= 2;
    return slots;
}

/* The batches' lens, starts and groups; HD_ERR_UNSUPPORTED where a tensor or a launch passes
 * the kernels' int indices. */
static hd_status plan_batches(hd_context *ctx, const hd_adamw_args *a, adamw_plan *pl)
{
    pl->partials = 0;
    for (size_t b = 0; b < pl->batch_count; b++) {
        adamw_batch *bt = &pl->batches[b];
        bt->first = b * pl->slots;
        bt->count = a->count - bt->first < pl->slots ? a->count - bt->first : pl->slots;
        size_t groups = 0;
        for (size_t k = 0; k < pl->slots; k++) {
            size_t n = k < bt->count ? hd__tensor_count(a->params[bt->first + k]) : 0;
            if (n > (size_t)INT_MAX - pl->span || groups > (size_t)INT_MAX - ceil_div(n, pl->span))
                return hd__error(ctx, HD_ERR_UNSUPPORTED,
                                 "fused: adamw's tensor %zu of %zu elements passes the kernels' "
                                 "int indices",
                                 bt->first + k, n);
            bt->lens[k] = (int32_t)n;
            bt->starts[k] = (int32_t)groups;
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

/* The one-launch kernel and how many of its groups run at once, where the tensors fit one
 * launch and the runtime runs a launch's groups all at once; else pl->resident stays NULL. */
static hd_status plan_resident(hd_fused *f, hd_context *ctx, adamw_plan *pl, size_t *capacity)
{
    *capacity = 0;
    if (pl->batch_count != 1 || (!f->resident_emulated && !hd__rt_info(f->rt)->resident))
        return HD_OK;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    snprintf(options, sizeof options, "-DWG=%zu -DROWS=1 -DELEMS=%d -DHOLD=%d -DSLOTS=%zu", pl->wg,
             ADAMW_ELEMS, ADAMW_RESIDENT_HOLD, pl->slots);
    hd_kernel *k;
    hd_status s = hd__fused_kernel(f, ctx, HD_FUSED_ADAMW, options, "adamw_resident", pl->wg, &k);
    if (s == HD_OK)
        s = hd__fused_resident_groups(f, ctx, k, pl->wg, capacity);
    if (s == HD_OK && *capacity > 0)
        pl->resident = k;
    return s;
}

/* The update, and with the norm measured, the norm and the update that follows it: on NVIDIA's
 * devices (PTX) its p, m and v pass L2 with the evict-first hint, so that the gradients the
 * norm has just read stay there for it (adamw.cl's EVICT_FIRST). */
static hd_status build_kernels(hd_fused *f, hd_context *ctx, bool measure, adamw_plan *pl)
{
    char options[HD_FUSED_OPTIONS_CAPACITY];
    snprintf(options, sizeof options, "-DWG=%zu -DROWS=1 -DELEMS=%d -DSLOTS=%zu%s", pl->wg,
             ADAMW_ELEMS, pl->slots, measure && f->mma ? " -DEVICT_FIRST=1" : "");
    hd_status s =
        hd__fused_kernel(f, ctx, HD_FUSED_ADAMW, options,
                         measure ? "adamw_update_after_norm" : "adamw_update", pl->wg, &pl->update);
    if (s == HD_OK && measure)
        s = hd__fused_kernel(f, ctx, HD_FUSED_ADAMW, options, "adamw_grad_norm", pl->wg, &pl->norm);
    return s;
}

/* Everything that can refuse the step: the batches, the kernels, the partials, the arrival
 * counter and the norm's scratch where no grad_norm receives it. */
static hd_status prepare(hd_fused *f, hd_context *ctx, const hd_adamw_args *a, bool measure,
                         adamw_plan *pl)
{
    pl->wg = ADAMW_WG;
    while (pl->wg > f->device_max_group) /* the norm's tree takes a power of two */
        pl->wg /= 2;
    pl->slots = slots_for(f);
    pl->batch_count = ceil_div(a->count, pl->slots);
    pl->batches = malloc((pl->batch_count > 0 ? pl->batch_count : 1) * sizeof *pl->batches);
    if (pl->batches == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "fused: adamw's batches of %zu tensors",
                         a->count);
    size_t capacity = 0;
    hd_status s = measure ? plan_resident(f, ctx, pl, &capacity) : HD_OK;
    pl->span = pl->wg * ADAMW_ELEMS;
    if (s == HD_OK)
        s = plan_batches(ctx, a, pl);
    if (pl->partials == 0) /* nothing to step: the two-launch form writes a zero norm */
        pl->resident = NULL;
    /* Where launches depend programmatically, the update's loads ahead of the norm's end take
     * less time than the one launch unless its groups hold every gradient in registers (one
     * span per resident group and held span; BENCHMARKS.md, "AdamW's update loaded ahead"). */
    if (hd__rt_info(f->rt)->dependent_launch && capacity * ADAMW_RESIDENT_HOLD < pl->partials)
        pl->resident = NULL;
    pl->resident_groups = capacity < pl->partials ? capacity : pl->partials;
    if (s == HD_OK && pl->resident == NULL)
        s = build_kernels(f, ctx, measure, pl);
    if (s == HD_OK && measure)
        s = hd__fused_buffer(f, ctx, pl->partials * sizeof(float), &pl->part);
    if (s == HD_OK && measure && pl->resident != NULL)
        s = hd__fused_grid_wait(f, ctx, &pl->count, &pl->flag);
    else if (s == HD_OK && measure)
        s = hd__fused_arrival_counter(f, ctx, &pl->count);
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

enum {
    NORM_ARGS = 3 * ADAMW_SLOTS_MAX + 5,
    UPDATE_ARGS = 6 * ADAMW_SLOTS_MAX + 10,
    RESIDENT_ARGS = 6 * ADAMW_SLOTS_MAX + 15,
};

/* The norm's fixed arguments, which outlive each launch. */
typedef struct norm_scalars {
    int32_t part0, groups;
} norm_scalars;

static hd_status launch_norm_batch(hd_fused *f, hd_context *ctx, const hd_adamw_args *a,
                              const adamw_plan *pl, const adamw_batch *bt, const norm_scalars *n,
                              const struct hd_device_buffer *total)
{
    const struct hd_device_buffer count = {.mem = pl->count, .bytes = sizeof(int32_t)};
    hd_fused_arg list[NORM_ARGS];
    int at = 0;
    for (size_t k = 0; k < pl->slots; k++) {
        list[at++] = HD_FUSED_BUFFER(slot_buffer(a->grads, bt, k));
        list[at++] = HD_FUSED_VALUE(bt->lens[k]);
        list[at++] = HD_FUSED_VALUE(bt->starts[k]);
    }
    list[at++] = HD_FUSED_BUFFER(pl->part);
    list[at++] = HD_FUSED_VALUE(n->part0);
    list[at++] = HD_FUSED_VALUE(n->groups);
    list[at++] = HD_FUSED_BUFFER(&count);
    list[at++] = HD_FUSED_BUFFER(total);
    return hd__fused_launch_args(f, ctx, pl->norm, bt->groups, pl->wg, list, at);
}

/* total = the 2-norm of every gradient: each batch's sums of squares, the last work-group of
 * them adding them all; 0 where there are no elements. */
static hd_status launch_norm(hd_fused *f, hd_context *ctx, const hd_adamw_args *a,
                             const adamw_plan *pl, const struct hd_device_buffer *total)
{
    if (pl->partials == 0)
        return hd__rt_zero(f->rt, ctx, total->mem, sizeof(float));
    hd_status s = HD_OK;
    bool counted = false; /* a launch queued: the counter no longer zero until the last */
    norm_scalars n = {0, (int32_t)pl->partials};
    for (size_t b = 0; b < pl->batch_count && s == HD_OK; b++) {
        if (pl->batches[b].groups > 0)
            s = launch_norm_batch(f, ctx, a, pl, &pl->batches[b], &n, total);
        counted = counted || (s == HD_OK && pl->batches[b].groups > 0);
        n.part0 += (int32_t)pl->batches[b].groups;
    }
    if (s != HD_OK && counted) /* the counter left for the next kernel that counts on it */
        (void)hd__rt_zero(f->rt, ctx, pl->count, sizeof(int32_t));
    return s;
}

/* The update's scalar arguments, which outlive each launch. */
typedef struct update_scalars {
    hd_adamw_factors f;
    float max_norm;
} update_scalars;

/* The update's per-slot arguments (p, g, m, v, len, start of each) from list[0]; how many. */
static int put_slots(hd_fused_arg *list, const hd_adamw_args *a, const adamw_plan *pl,
                     const adamw_batch *bt)
{
    int n = 0;
    for (size_t k = 0; k < pl->slots; k++) {
        list[n++] = HD_FUSED_BUFFER(slot_buffer((const hd_tensor *const *)a->params, bt, k));
        list[n++] = HD_FUSED_BUFFER(slot_buffer(a->grads, bt, k));
        list[n++] = HD_FUSED_BUFFER(slot_buffer((const hd_tensor *const *)a->m, bt, k));
        list[n++] = HD_FUSED_BUFFER(slot_buffer((const hd_tensor *const *)a->v, bt, k));
        list[n++] = HD_FUSED_VALUE(bt->lens[k]);
        list[n++] = HD_FUSED_VALUE(bt->starts[k]);
    }
    return n;
}

/* The step's 8 factors from list[0]; how many. */
static int put_factors(hd_fused_arg *list, const update_scalars *u)
{
    int n = 0;
    list[n++] = HD_FUSED_VALUE(u->f.decay);
    list[n++] = HD_FUSED_VALUE(u->f.beta1);
    list[n++] = HD_FUSED_VALUE(u->f.one_minus_beta1);
    list[n++] = HD_FUSED_VALUE(u->f.beta2);
    list[n++] = HD_FUSED_VALUE(u->f.one_minus_beta2);
    list[n++] = HD_FUSED_VALUE(u->f.step_size);
    list[n++] = HD_FUSED_VALUE(u->f.inv_bc2_sqrt);
    list[n++] = HD_FUSED_VALUE(u->f.eps);
    return n;
}

static hd_status launch_update(hd_fused *f, hd_context *ctx, const hd_adamw_args *a,
                               const adamw_plan *pl, const adamw_batch *bt, const update_scalars *u,
                               const struct hd_device_buffer *total)
{
    hd_fused_arg list[UPDATE_ARGS];
    int n = put_slots(list, a, pl, bt);
    n += put_factors(list + n, u);
    list[n++] = HD_FUSED_BUFFER(total);
    list[n++] = HD_FUSED_VALUE(u->max_norm);
    return hd__fused_launch_args(f, ctx, pl->update, bt->groups, pl->wg, list, n);
}

/* The norm into total and the update (clipped where clip is set) in one launch. */
static hd_status launch_resident(hd_fused *f, hd_context *ctx, const hd_adamw_args *a,
                                 const adamw_plan *pl, const struct hd_device_buffer *total,
                                 bool clip)
{
    update_scalars u = {
        hd__adamw_factors(a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->step),
        a->max_grad_norm};
    const adamw_batch *bt = &pl->batches[0];
    const struct hd_device_buffer count = {.mem = pl->count, .bytes = sizeof(int32_t)};
    const struct hd_device_buffer flag = {.mem = pl->flag, .bytes = sizeof(int32_t)};
    int32_t spans = (int32_t)bt->groups, clip_arg = clip ? 1 : 0;
    hd_fused_arg list[RESIDENT_ARGS];
    int n = put_slots(list, a, pl, bt);
    list[n++] = HD_FUSED_VALUE(spans);
    n += put_factors(list + n, &u);
    list[n++] = HD_FUSED_BUFFER(pl->part);
    list[n++] = HD_FUSED_BUFFER(&count);
    list[n++] = HD_FUSED_BUFFER(&flag);
    list[n++] = HD_FUSED_BUFFER(total);
    list[n++] = HD_FUSED_VALUE(u.max_norm);
    list[n++] = HD_FUSED_VALUE(clip_arg);
    return hd__fused_launch_resident_args(f, ctx, pl->resident, pl->resident_groups, pl->wg, list,
                                          n);
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
    if (s == HD_OK && pl.resident != NULL)
        s = launch_resident(f, ctx, a, &pl, total, clip);
    else if (s == HD_OK && measure)
        s = launch_norm(f, ctx, a, &pl, total);
    if (s == HD_OK && pl.resident == NULL)
        s = launch_updates(f, ctx, a, &pl, clip ? total : NULL);
    hd__fused_buffer_release(f, pl.part);
    hd__fused_buffer_release(f, pl.total_scratch);
    free(pl.batches);
    return s;
}
