/* Softmax, layer norm and RMS norm: one launch each, ROWS rows per work-group. */

#include "backends/fused/internal.h"

typedef struct row_kernel {
    hd_fused_program program;
    const char *cached, *looped; /* kernel names */
} row_kernel;

static const row_kernel softmax_kernel = {HD_FUSED_SOFTMAX, "softmax_cached", "softmax_looped"};
static const row_kernel layer_norm_kernel = {HD_FUSED_LAYER_NORM, "layer_norm_cached",
                                             "layer_norm_looped"};
static const row_kernel rms_norm_kernel = {HD_FUSED_RMS_NORM, "rms_norm_cached",
                                           "rms_norm_looped"};

/* Arguments: x, [gamma, [beta,]] y, rows, cols, [eps]. */
static hd_status run_rows(hd_fused *f, hd_context *ctx, const row_kernel *rk,
                          const hd_row_args *r)
{
    hd_fused_params p;
    bool cached;
    hd_status s = hd__fused_rows_params(f, ctx, r->variant, r->cols, &p, &cached);
    if (s != HD_OK)
        return s;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd__fused_options(HD_FUSED_FAMILY_ROWS, &p, 0, options);
    hd_kernel *k;
    s = hd__fused_kernel(f, ctx, rk->program, options, cached ? rk->cached : rk->looped,
                         (size_t)p.wg, &k);
    if (s != HD_OK)
        return s;

    hd_devmem x = hd__fused_mem(r->x), y = hd__fused_mem(r->y);
    int32_t rows = (int32_t)r->rows, cols = (int32_t)r->cols;
    uint32_t i = 0;
    s = hd__fused_set_arg(ctx, k, i++, sizeof x, &x);
    if (s == HD_OK && r->gamma != NULL) {
        hd_devmem g = hd__fused_mem(r->gamma);
        s = hd__fused_set_arg(ctx, k, i++, sizeof g, &g);
    }
    if (s == HD_OK && r->beta != NULL) {
        hd_devmem b = hd__fused_mem(r->beta);
        s = hd__fused_set_arg(ctx, k, i++, sizeof b, &b);
    }
    if (s == HD_OK)
        s = hd__fused_set_arg(ctx, k, i++, sizeof y, &y);
    if (s == HD_OK)
        s = hd__fused_set_arg(ctx, k, i++, sizeof rows, &rows);
    if (s == HD_OK)
        s = hd__fused_set_arg(ctx, k, i++, sizeof cols, &cols);
    if (s == HD_OK && rk->program != HD_FUSED_SOFTMAX) {
        float eps = r->eps;
        s = hd__fused_set_arg(ctx, k, i++, sizeof eps, &eps);
    }
    if (s != HD_OK)
        return s;
    size_t groups = (r->rows + (size_t)p.rows - 1) / (size_t)p.rows;
    return hd__fused_launch(f, ctx, k, groups, (size_t)p.wg);
}

hd_status hd__fused_softmax(void *state, hd_context *ctx, const hd_row_args *args)
{
    return run_rows(state, ctx, &softmax_kernel, args);
}

hd_status hd__fused_layer_norm(void *state, hd_context *ctx, const hd_row_args *args)
{
    return run_rows(state, ctx, &layer_norm_kernel, args);
}

hd_status hd__fused_rms_norm(void *state, hd_context *ctx, const hd_row_args *args)
{
    return run_rows(state, ctx, &rms_norm_kernel, args);
}
