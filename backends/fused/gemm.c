/* GEMM: for few rows (m <= 16, A not transposed; few_rows.c), where reading B once at full
 * bandwidth is the whole cost, the strip kernel (B stored k x n, its variants tuned) or the
 * dot form (B stored n x k, no variant); the tiled engine (tile.c) for the rest, and wherever
 * a tuned variant names it. */
#include <limits.h>

#include "backends/fused/internal.h"

/* Whether g runs on the few-row kernels: a few-row variant names them; without a variant,
 * few rows of A not transposed, within the dot form's row count and 32-bit indexing where B
 * is transposed. */
static bool runs_few_rows(const hd_gemm_args *g)
{
    if (g->variant != NULL)
        return !hd__fused_is_tile_variant(g->variant);
    if (!g->trans_b)
        return g->m <= 16 && !g->trans_a;
    return g->m <= HD_FUSED_DOT_FORM_MAX_ROWS && !g->trans_a &&
           (g->k == 0 || (g->n <= INT_MAX / g->k && g->m <= INT_MAX / g->k));
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
    if (!runs_few_rows(g)) {
        hd_fused_tile_call call = tile_call(g, 1);
        return hd__fused_tile_gemm(f, ctx, &call);
    }
    if (g->variant != NULL && (g->m > 16 || g->trans_a || g->trans_b))
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: the few-row variant '%.100s' takes at most 16 rows and no "
                         "transposes",
                         g->variant);
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
