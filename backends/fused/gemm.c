/* GEMM: the GEMV-style strip kernel of gemv.cl for few rows (m <= 16, no transposes), where
 * reading B once at full bandwidth is the whole cost; the tiled engine (tile.c) for the rest,
 * and wherever a tuned variant names it. */

#include "backends/fused/internal.h"

static hd_fused_tile_call tile_call(const hd_gemm_args *g, size_t batch)
{
    size_t m = g->m, n = g->n, k = g->k;
    return (hd_fused_tile_call){
        .m = m,
        .n = n,
        .k = k,
        .batch = batch,
        .alpha = g->alpha,
        .beta = g->beta,
        .a = {hd__fused_mem(g->a), g->trans_a ? m : k, g->trans_a},
        .b = {hd__fused_mem(g->b), g->trans_b ? k : n, g->trans_b},
        .c = hd__fused_mem(g->c),
        .ldc = n,
        .stride_a = batch > 1 ? m * k : 0,
        .stride_b = batch > 1 ? k * n : 0,
        .stride_c = batch > 1 ? m * n : 0,
        .precision = g->precision,
        .variant = g->variant,
    };
}

hd_status hd__fused_gemm_batched(void *state, hd_context *ctx, const hd_gemm_args *g)
{
    hd_fused_tile_call call = tile_call(g, g->batch);
    return hd__fused_tile_gemm(state, ctx, &call);
}

hd_status hd__fused_gemm(void *state, hd_context *ctx, const hd_gemm_args *g)
{
    hd_fused *f = state;
    bool few_rows = g->variant != NULL ? !hd__fused_is_tile_variant(g->variant)
                                       : g->m <= 16 && !g->trans_a && !g->trans_b;
    if (!few_rows) {
        hd_fused_tile_call call = tile_call(g, 1);
        return hd__fused_tile_gemm(f, ctx, &call);
    }
    if (g->m > 16 || g->trans_a || g->trans_b)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: GEMM takes at most 16 rows and no transposes");
    hd_fused_params p;
    hd_status s = hd__fused_gemv_params(f, ctx, g->variant, g->n, g->k, g->m, NULL, &p);
    if (s != HD_OK)
        return s;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd__fused_options(HD_FUSED_FAMILY_GEMV, &p, g->m, options);
    size_t group = (size_t)p.tn * (size_t)p.ks;
    cl_kernel k;
    s = hd__fused_kernel(f, ctx, HD_FUSED_GEMV, options, "gemm_rows", group, &k);
    if (s != HD_OK)
        return s;

    cl_int m = (cl_int)g->m, n = (cl_int)g->n, kk = (cl_int)g->k;
    cl_float alpha = g->alpha, beta = g->beta;
    cl_mem a = hd__fused_mem(g->a), b = hd__fused_mem(g->b), c = hd__fused_mem(g->c);
    size_t nv = g->n / (size_t)p.vec;
    size_t strips = (nv + (size_t)p.tn - 1) / (size_t)p.tn;
    cl_mem part, count;
    if ((s = hd__fused_kg_buffers(f, ctx, &p, strips, g->m, c, &part, &count)) != HD_OK)
        return s;
    if ((s = hd__fused_set_arg(ctx, k, 0, sizeof m, &m)) != HD_OK ||
        (s = hd__fused_set_arg(ctx, k, 1, sizeof n, &n)) != HD_OK ||
        (s = hd__fused_set_arg(ctx, k, 2, sizeof kk, &kk)) != HD_OK ||
        (s = hd__fused_set_arg(ctx, k, 3, sizeof alpha, &alpha)) != HD_OK ||
        (s = hd__fused_set_arg(ctx, k, 4, sizeof a, &a)) != HD_OK ||
        (s = hd__fused_set_arg(ctx, k, 5, sizeof b, &b)) != HD_OK ||
        (s = hd__fused_set_arg(ctx, k, 6, sizeof beta, &beta)) != HD_OK ||
        (s = hd__fused_set_arg(ctx, k, 7, sizeof c, &c)) != HD_OK ||
        (s = hd__fused_set_arg(ctx, k, 8, sizeof part, &part)) != HD_OK ||
        (s = hd__fused_set_arg(ctx, k, 9, sizeof count, &count)) != HD_OK)
        return s;
    return hd__fused_launch(ctx, k, strips * (size_t)p.kg, group);
}
