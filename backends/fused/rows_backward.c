/* The backward passes of softmax, layer norm and RMS norm (kernels/rows_backward.cl): dx in
 * one launch; the norms' weight gradients, when wanted, in two small launches before it (the
 * rows' statistics into a scratch buffer, then one work-item per column), deterministic and
 * without atomics. */
#include "backends/fused/internal.h"

/* Work-items per group of the column launch: a few warps, any device. */
#define GRADS_GROUP 64

typedef struct arg {
    size_t size;
    const void *value; /* NULL with a cl_mem size: a NULL buffer argument */
} arg;

static hd_status launch(hd_fused *f, hd_context *ctx, const char *options, const char *name,
                        size_t group, size_t groups, const arg *args, int count)
{
    cl_kernel k;
    hd_status s = hd__fused_kernel(f, ctx, HD_FUSED_ROWS_BACKWARD, options, name, group, &k);
    for (int i = 0; i < count && s == HD_OK; i++)
        s = hd__fused_set_arg(ctx, k, (cl_uint)i, args[i].size, args[i].value);
    return s == HD_OK ? hd__fused_launch(ctx, k, groups, group) : s;
}

/* The scratch of 2 x rows floats, grown on demand; in-order queue: reused by every call. */
static hd_status stats_buffer(hd_fused *f, hd_context *ctx, size_t rows, cl_mem *out)
{
    size_t bytes = 2 * rows * sizeof(float);
    if (f->backward_stats == NULL || f->backward_stats_bytes < bytes) {
        if (f->backward_stats != NULL)
            clReleaseMemObject(f->backward_stats);
        f->backward_stats_bytes = 0;
        cl_int err;
        f->backward_stats =
            clCreateBuffer(hd__cl_context(ctx->cl), CL_MEM_READ_WRITE, bytes, NULL, &err);
        if (err != CL_SUCCESS) {
            f->backward_stats = NULL;
            return hd__cl_error(ctx, err, "clCreateBuffer (norm backward statistics)");
        }
        f->backward_stats_bytes = bytes;
    }
    *out = f->backward_stats;
    return HD_OK;
}

static hd_status norm_weight_grads(hd_fused *f, hd_context *ctx, const char *options,
                                   const hd_fused_params *p, const hd_row_backward_args *r,
                                   cl_int center)
{
    cl_mem stats, x = hd__fused_mem(r->x), dy = hd__fused_mem(r->dy);
    cl_mem dg = r->dgamma != NULL ? hd__fused_mem(r->dgamma) : NULL;
    cl_mem db = r->dbeta != NULL ? hd__fused_mem(r->dbeta) : NULL;
    cl_int rows = (cl_int)r->rows, cols = (cl_int)r->cols;
    cl_float eps = r->eps;
    hd_status s = stats_buffer(f, ctx, r->rows, &stats);
    const arg st[] = {{sizeof x, &x},       {sizeof stats, &stats}, {sizeof rows, &rows},
                      {sizeof cols, &cols}, {sizeof eps, &eps},     {sizeof center, &center}};
    size_t row_groups = (r->rows + (size_t)p->rows - 1) / (size_t)p->rows;
    if (s == HD_OK)
        s = launch(f, ctx, options, "norm_stats_rows", (size_t)p->wg, row_groups, st, 6);
    const arg wg[] = {{sizeof x, &x},
                      {sizeof dy, &dy},
                      {sizeof stats, &stats},
                      {sizeof dg, dg != NULL ? &dg : NULL},
                      {sizeof db, db != NULL ? &db : NULL},
                      {sizeof rows, &rows},
                      {sizeof cols, &cols}};
    size_t col_groups = (r->cols + GRADS_GROUP - 1) / GRADS_GROUP;
    if (s == HD_OK)
        s = launch(f, ctx, options, "norm_weight_grads", GRADS_GROUP, col_groups, wg, 7);
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
    cl_int center = norm == 1;
    if (norm && (r->dgamma != NULL || r->dbeta != NULL))
        s = norm_weight_grads(f, ctx, options, &p, r, center);
    cl_mem x = hd__fused_mem(r->x), dy = hd__fused_mem(r->dy), dx = hd__fused_mem(r->dx);
    cl_mem g = norm ? hd__fused_mem(r->gamma) : NULL;
    cl_int rows = (cl_int)r->rows, cols = (cl_int)r->cols;
    cl_float eps = r->eps;
    size_t groups = (r->rows + (size_t)p.rows - 1) / (size_t)p.rows;
    if (s != HD_OK)
        return s;
    if (!norm) {
        const arg a[] = {{sizeof x, &x},
                         {sizeof dy, &dy},
                         {sizeof dx, &dx},
                         {sizeof rows, &rows},
                         {sizeof cols, &cols}};
        return launch(f, ctx, options, "softmax_backward_rows", (size_t)p.wg, groups, a, 5);
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
