/* GEMM on the family the router gives (route.c): few rows on the few-row kernels (few_rows.c),
 * where reading B once at full bandwidth is the whole cost, the strip kernel (B stored k x n,
 * its variants tuned) or the dot form (B stored n x k, no variant); the tiled engine (tile.c)
 * for the rest, and wherever a tuned variant names it. */
#include <limits.h>

#include "backends/fused/internal.h"

/* Whether the dot form indexes g's sizes with its 32-bit ints. */
static bool dot_form_indexes(const hd_gemm_args *g)
{
    return g->k == 0 || (g->n <= INT_MAX / g->k && g->m <= INT_MAX / g->k);
}

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
    const hd_shape shape = {.dim = {g->m, g->n, g->k},
                            .trans_a = g->trans_a,
                            .trans_b = g->trans_b,
                            .precision = g->precision};
    hd_fused_route route = hd__fused_route(f, HD_OP_GEMM, &shape, HD_PART_WHOLE, g->variant);
    if (route == HD_FUSED_ROUTE_DOT && !dot_form_indexes(g))
        route = HD_FUSED_ROUTE_TILE; /* past the dot form's indexing: the tiled engine */
    if (route == HD_FUSED_ROUTE_TILE) {
        hd_fused_tile_call call = tile_call(g, 1);
        return hd__fused_tile_gemm(f, ctx, &call);
    }
    if (g->variant != NULL && (g->m > HD_FUSED_MAX_ROWS || g->trans_a || g->trans_b))
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: the few-row variant '%.100s' takes at most %d rows and no "
                         "transposes",
                         g->variant, HD_FUSED_MAX_ROWS);
    hd_fused_rows_call call = {.m = g->m,
                               .n = g->n,
                               .k = g->k,
                               .alpha = g->alpha,
                               .beta = g->beta,
                               .a = hd__fused_mem(g->a),
                               .b = hd__fused_mem(g->b),
                               .c = hd__fused_mem(g->c),
                               .b_trans = g->trans_b,
                               .variant = g->variant};
    return hd__fused_rows_gemm(f, ctx, &call);
}
