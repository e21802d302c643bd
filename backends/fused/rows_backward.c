/* The backward passes of softmax, layer norm and RMS norm (kernels/rows_backward.cl): dx in
 * one launch; the norms' weight gradients, when wanted, with dx in one pass where a row fits
 * in a work-group's registers, then the groups' partials added in group order (two launches);
 * for longer rows in three small launches before dx (the rows' statistics, partial sums per
 * chunk of rows and column, the partials added in chunk order). Deterministic and without
 * atomics either way. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/fused/internal.h"

/* Work-items per group of the column launches: a few warps, any device. */
#define GRADS_GROUP 64
/* norm_weight_combine's work-group: columns by slices of each column's partials (as
 * kernels/rows_backward.cl defines them). */
#define COMBINE_COLS  32
#define COMBINE_GROUP (COMBINE_COLS * 8)
/* Rows per chunk of the weight-gradient partials: enough work-items to fill a device for 1024
 * columns from a few thousand rows, short enough chains of dependent adds. */
#define GRADS_CHUNK 256

typedef struct arg {
    size_t size;
    const void *value; /* NULL with a hd_devmem size: a NULL buffer argument */
} arg;

/* Sets k's arguments and launches groups work-groups of group work-items. */
static hd_status launch_kernel(hd_fused *f, hd_context *ctx, hd_kernel *k, size_t group,
                               size_t groups, const arg *args, int count)
{
    hd_status s = HD_OK;
    for (int i = 0; i < count && s == HD_OK; i++)
        s = hd__fused_set_arg(ctx, k, (uint32_t)i, args[i].size, args[i].value);
    return s == HD_OK ? hd__fused_launch(f, ctx, k, groups, group) : s;
}

static hd_status launch(hd_fused *f, hd_context *ctx, const char *options, const char *name,
                        size_t group, size_t groups, const arg *args, int count)
{
    hd_kernel *k;
    hd_status s = hd__fused_kernel(f, ctx, HD_FUSED_ROWS_BACKWARD, options, name, group, &k);
    return s == HD_OK ? launch_kernel(f, ctx, k, group, groups, args, count) : s;
}

/* Builds (or finds built) each named kernel of the program of options before anything is
 * launched: a build that fails then leaves every output as it was, for the fallback to start
 * from (dx may be dy, which the first launch would overwrite). */
static hd_status build_first(hd_fused *f, hd_context *ctx, const char *options,
                             const char *const names[], const size_t groups[], int count)
{
    hd_status s = HD_OK;
    for (int i = 0; i < count && s == HD_OK; i++) {
        hd_kernel *k;
        s = hd__fused_kernel(f, ctx, HD_FUSED_ROWS_BACKWARD, options, names[i], groups[i], &k);
    }
    return s;
}

/* A scratch buffer of at least bytes, grown on demand; in-order queue: reused by every call. */
static hd_status scratch(hd_fused *f, hd_context *ctx, size_t bytes, hd_devmem *buf,
                         size_t *capacity)
{
    if (*buf != NULL && *capacity >= bytes)
        return HD_OK;
    hd__rt_scratch_free(f->rt, *buf);
    *capacity = 0;
    hd_status s = hd__rt_scratch_create(f->rt, ctx, bytes, "norm backward scratch", buf);
    if (s != HD_OK)
        return s;
    *capacity = bytes;
    return HD_OK;
}

/* dgamma and dbeta (either may be absent) from the partials of `chunks` chunks of rows in
 * part (dgamma's chunk by chunk, then dbeta's), added per column in a fixed order. */
static hd_status combine_partials(hd_fused *f, hd_context *ctx, const char *options,
                                  const hd_row_backward_args *r, hd_devmem part, int32_t chunks)
{
    hd_devmem dg = r->dgamma != NULL ? hd__fused_mem(r->dgamma) : NULL;
    hd_devmem db = r->dbeta != NULL ? hd__fused_mem(r->dbeta) : NULL;
    int32_t cols = (int32_t)r->cols;
    const arg co[] = {{sizeof part, &part},
                      {sizeof dg, dg != NULL ? &dg : NULL},
                      {sizeof db, db != NULL ? &db : NULL},
                      {sizeof cols, &cols},
                      {sizeof chunks, &chunks}};
    return launch(f, ctx, options, "norm_weight_combine", COMBINE_GROUP,
                  (r->cols + COMBINE_COLS - 1) / COMBINE_COLS, co, 5);
}

static hd_status norm_weight_grads(hd_fused *f, hd_context *ctx, const char *options,
                                   const hd_fused_params *p, const hd_row_backward_args *r,
                                   int32_t center)
{
    hd_devmem x = hd__fused_mem(r->x), dy = hd__fused_mem(r->dy);
    size_t chunks = (r->rows + GRADS_CHUNK - 1) / GRADS_CHUNK;
    size_t span = (r->cols + GRADS_GROUP - 1) / GRADS_GROUP * GRADS_GROUP;
    if (span > (size_t)INT_MAX / chunks || 2 * chunks > SIZE_MAX / sizeof(float) / r->cols)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "fused: %zu x %zu too large for the partials",
                         r->rows, r->cols);
    int32_t rows = (int32_t)r->rows, cols = (int32_t)r->cols, chunk = GRADS_CHUNK;
    int32_t nchunks = (int32_t)chunks, nspan = (int32_t)span;
    float eps = r->eps;
    hd_status s =
        scratch(f, ctx, 4 * r->rows * sizeof(float), &f->backward_stats, &f->backward_stats_bytes);
    if (s == HD_OK)
        s = scratch(f, ctx, 2 * chunks * r->cols * sizeof(float), &f->backward_parts,
                    &f->backward_parts_bytes);
    hd_devmem stats = f->backward_stats, part = f->backward_parts;
    const arg st[] = {{sizeof x, &x},       {sizeof stats, &stats}, {sizeof rows, &rows},
                      {sizeof cols, &cols}, {sizeof eps, &eps},     {sizeof center, &center}};
    size_t row_groups = (r->rows + (size_t)p->rows - 1) / (size_t)p->rows;
    if (s == HD_OK)
        s = launch(f, ctx, options, "norm_stats_rows", (size_t)p->wg, row_groups, st, 6);
    const arg pa[] = {{sizeof x, &x},         {sizeof dy, &dy},           {sizeof stats, &stats},
                      {sizeof part, &part},   {sizeof rows, &rows},       {sizeof cols, &cols},
                      {sizeof chunk, &chunk}, {sizeof nchunks, &nchunks}, {sizeof nspan, &nspan}};
    if (s == HD_OK)
        s = launch(f, ctx, options, "norm_weight_partials", GRADS_GROUP,
                   span / GRADS_GROUP * chunks, pa, 9);
    if (s == HD_OK)
        s = combine_partials(f, ctx, options, r, part, nchunks);
    return s;
}

/* Vectors per work-item the single pass holds in registers at most (per row: x, dy, gamma and
 * four partial sums each; with the next row's prefetch, x and dy twice). */
#define FUSED_CACHE_MAX 4
/* Work-items per group of the single pass: slots of T work-items, as many rows at a time as
 * the slots fit (a slot holds a row; T up to 512 for the longest rows). */
#define FUSED_GROUP 256

/* A norm's dx and weight gradients in one pass over x and dy (norm_backward_fused), then the
 * groups' partials added per column: where a row fits in the registers of a slot of at most 512
 * work-items. *done: whether it ran (or failed) here. */
static hd_status norm_fused(hd_fused *f, hd_context *ctx, const hd_fused_params *p,
                            const hd_row_backward_args *r, int32_t center, bool *done)
{
    size_t n = r->cols / (size_t)p->vec;
    size_t slot = 1; /* T: the fewest work-items whose registers hold the row */
    while (slot * FUSED_CACHE_MAX < n && slot < 512)
        slot *= 2;
    size_t wg = slot > FUSED_GROUP ? slot : FUSED_GROUP;
    *done = r->rows > 0 && n > 0 && n <= FUSED_CACHE_MAX * slot && wg <= f->device_max_group &&
            r->rows <= (size_t)INT_MAX && r->cols <= (size_t)INT_MAX;
    if (!*done)
        return HD_OK;
    hd_fused_params one = *p;
    one.wg = (int)wg;
    one.rows = (int)(wg / slot);
    one.cache = (int)((n + slot - 1) / slot);
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd__fused_options(HD_FUSED_FAMILY_ROWS, &one, 0, options);
    /* the next row's loads in flight through the reductions: twice the registers for x and
     * dy, which 512 work-items of the longest rows do not have */
    bool prefetch = wg <= 256;
    char fused_options[HD_FUSED_OPTIONS_CAPACITY];
    int len = snprintf(fused_options, sizeof fused_options, "%s -DPREFETCH=%d", options, prefetch);
    if (len < 0 || (size_t)len >= sizeof fused_options)
        return hd__error(ctx, HD_ERR_INTERNAL, "fused: build options too long");
    hd_kernel *k;
    hd_status built = hd__fused_kernel(f, ctx, HD_FUSED_ROWS_BACKWARD, fused_options,
                                       "norm_backward_fused", wg, &k);
    /* a compiler may give the kernel's registers fewer work-items than asked (NVIDIA's gave
     * half the 512 of CACHE=3: commit ffaf78d): the three-launch path then */
    if (built == HD_ERR_UNSUPPORTED && wg > 256) {
        hd__error_clear(ctx);
        *done = false;
        return HD_OK;
    }
    if (built == HD_OK)
        built = build_first(f, ctx, options, (const char *const[]){"norm_weight_combine"},
                            (const size_t[]){COMBINE_GROUP}, 1);
    if (built != HD_OK)
        return built;
    /* work-groups per compute unit: one with the prefetch, which keeps the loads in flight
     * alone (the cases layer_norm_backward 8192x4096 and 32768x1024: one per unit at least as
     * fast as two, and ahead of four); without it, others load while one reduces (2 per unit
     * the faster at 8192 x 4096, 4 at 32768 x 1024; commits 82d0713, 89a17cb) */
    size_t units = f->compute_units > 0 ? f->compute_units : 1;
    size_t wanted = units * (prefetch ? 1 : one.cache >= 3 ? 2 : 4);
    size_t groups = r->rows < wanted ? r->rows : wanted;
    size_t rows_at_once = (size_t)one.rows;
    size_t chunk = (r->rows + groups - 1) / groups;
    chunk = (chunk + rows_at_once - 1) / rows_at_once * rows_at_once; /* no idle slot */
    groups = (r->rows + chunk - 1) / chunk;
    if (2 * groups > SIZE_MAX / sizeof(float) / r->cols)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "fused: %zu x %zu too large for the partials",
                         r->rows, r->cols);
    hd_status s = scratch(f, ctx, 2 * groups * r->cols * sizeof(float), &f->backward_parts,
                          &f->backward_parts_bytes);
    hd_devmem x = hd__fused_mem(r->x), g = hd__fused_mem(r->gamma), dy = hd__fused_mem(r->dy),
              dx = hd__fused_mem(r->dx), part = f->backward_parts;
    int32_t rows = (int32_t)r->rows, cols = (int32_t)r->cols, nchunk = (int32_t)chunk,
            ngroups = (int32_t)groups;
    float eps = r->eps;
    const arg a[] = {{sizeof x, &x},
                     {sizeof g, &g},
                     {sizeof dy, &dy},
                     {sizeof dx, &dx},
                     {sizeof part, &part},
                     {sizeof rows, &rows},
                     {sizeof cols, &cols},
                     {sizeof eps, &eps},
                     {sizeof center, &center},
                     {sizeof nchunk, &nchunk},
                     {sizeof ngroups, &ngroups}};
    if (s == HD_OK)
        s = launch_kernel(f, ctx, k, wg, groups, a, 11);
    if (s == HD_OK && (s = combine_partials(f, ctx, options, r, part, ngroups)) != HD_OK)
        hd__error_outputs_changed(ctx); /* dx is written (over dy, in place) */
    return s;
}

static hd_status run(hd_fused *f, hd_context *ctx, const hd_row_backward_args *r, int norm)
{
    hd_fused_params p;
    bool cached;
    hd_status s = hd__fused_rows_params(f, ctx, r->variant, r->cols, &p, &cached);
    if (s != HD_OK)
        return s;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd__fused_options(HD_FUSED_FAMILY_ROWS, &p, 0, options);
    int32_t center = norm == 1;
    if (norm && (r->dgamma != NULL || r->dbeta != NULL)) {
        bool done;
        s = norm_fused(f, ctx, &p, r, center, &done);
        if (done || s != HD_OK)
            return s;
        static const char *const names[] = {"norm_backward_rows", "norm_stats_rows",
                                            "norm_weight_partials", "norm_weight_combine"};
        const size_t groups[] = {(size_t)p.wg, (size_t)p.wg, GRADS_GROUP, COMBINE_GROUP};
        s = build_first(f, ctx, options, names, groups, 4);
        if (s == HD_OK)
            s = norm_weight_grads(f, ctx, options, &p, r, center);
    }
    hd_devmem x = hd__fused_mem(r->x), dy = hd__fused_mem(r->dy), dx = hd__fused_mem(r->dx);
    hd_devmem g = norm ? hd__fused_mem(r->gamma) : NULL;
    int32_t rows = (int32_t)r->rows, cols = (int32_t)r->cols;
    float eps = r->eps;
    size_t groups = (r->rows + (size_t)p.rows - 1) / (size_t)p.rows;
    if (s != HD_OK)
        return s;
    if (!norm) {
        const arg a[] = {{sizeof x, &x},
                         {sizeof dy, &dy},
                         {sizeof dx, &dx},
                         {sizeof rows, &rows},
                         {sizeof cols, &cols}};
        return launch(f, ctx, options, cached ? "softmax_backward_cached" : "softmax_backward_rows",
                      (size_t)p.wg, groups, a, 5);
    }
    const arg a[] = {{sizeof x, &x},     {sizeof g, &g},          {sizeof dy, &dy},
                     {sizeof dx, &dx},   {sizeof rows, &rows},    {sizeof cols, &cols},
                     {sizeof eps, &eps}, {sizeof center, &center}};
    return launch(f, ctx, options, "norm_backward_rows", (size_t)p.wg, groups, a, 8);
}

hd_status hd__fused_softmax_backward(void *state, hd_context *ctx, const hd_row_backward_args *r)
{
    return run(state, ctx, r, 0);
}

hd_status hd__fused_layer_norm_backward(void *state, hd_context *ctx, const hd_row_backward_args *r)
{
    return run(state, ctx, r, 1);
}

hd_status hd__fused_rms_norm_backward(void *state, hd_context *ctx, const hd_row_backward_args *r)
{
    return run(state, ctx, r, 2);
}
