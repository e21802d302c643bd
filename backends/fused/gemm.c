/* GEMM: the strip kernel for few rows (m <= 16, no transposes; few_rows.c), where reading B
 * once at full bandwidth is the whole cost; the tiled engine (tile.c) for the rest, and
 * wherever a tuned variant names it. */

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
    hd_fused_rows_call call = {.m = g->m,
                               .n = g->n,
                               .k = g->k,
                               .alpha = g->alpha,
                               .beta = g->beta,
                               .a = hd__fused_mem(g->a),
                               .b = hd__fused_mem(g->b),
                               .c = hd__fused_mem(g->c),
                               .variant = g->variant};
    return hd__fused_rows_gemm(f, ctx, &call);
}
