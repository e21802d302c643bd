/*
 * Products of few rows (m <= HD_FUSED_MAX_ROWS), where reading B once at full bandwidth is the
 * whole cost: B stored k x n on the strip kernel of gemv.cl (columns of B to work-items), B stored
 * n x k (op(B) = B^T) on the dot form of gemv_nt.cl (rows of B to warps). hd_gemm's few-row calls
 * and LoRA's few-token backward run here.
 */
#include <limits.h>
#include <stdio.h>

#include "backends/fused/internal.h"

#define NT_WARPS 8
/* Rows of B a slot of the dot form serves (gemv_nt.cl), by MR (m rounded up to a power of
 * two): more rows of B per slot load A's rows from cache fewer times, fewer leave more slots to
 * spread over the units; the counts that ran fastest on B 4096 x 4096 for each MR (commit
 * 7896e80). */
static size_t rows_per_slot(size_t mr)
{
    return mr <= 2 ? 1 : mr == 8 ? 4 : 2;
}

/* A prepared product: the kernel, its launch, and for the strip kernel its KG scratch. */
typedef struct rows_launch {
    hd_kernel *kernel;
    size_t groups, group;
    hd_devmem part, count;
} rows_launch;

static bool fits_int(size_t v)
{
    return v <= (size_t)INT_MAX;
}

/* Warps per slot (rows of B) in the dot form: one where slots are many; more, up to all the
 * work-group's, where one warp per slot would leave compute units without a work-group. */
static int warps_per_row(const hd_fused *f, size_t n)
{
    size_t units = f->compute_units > 0 ? f->compute_units : 1;
    int kw = 1;
    while (kw < NT_WARPS && (n * (size_t)kw + NT_WARPS - 1) / NT_WARPS < units)
        kw *= 2;
    return kw;
}

static hd_status setup(hd_fused *f, hd_context *ctx, const hd_fused_rows_call *c, rows_launch *l)
{
    if (c->m > HD_FUSED_MAX_ROWS || !fits_int(c->n) || !fits_int(c->k) || !fits_int(c->k2) ||
        !fits_int(c->m * c->k) || !fits_int(c->n * c->k))
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: a few-row product takes at most %d rows and 32-bit indexable "
                         "sizes",
                         HD_FUSED_MAX_ROWS);
    if (c->k2 > 0 && !c->b_trans)
        return hd__error(ctx, HD_ERR_INTERNAL, "fused: the strip kernel takes one product only");
    if (c->m == 0 || c->n == 0)
        return HD_OK; /* nothing to launch */
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd_status s;
    if (!c->b_trans) {
        hd_fused_params p;
        if ((s = hd__fused_gemv_params(f, ctx, c->variant, c->n, c->k, c->m, NULL, &p)) != HD_OK)
            return s;
        hd__fused_options(HD_FUSED_FAMILY_GEMV, &p, c->m, options);
        l->group = (size_t)p.tn * (size_t)p.ks;
        size_t nv = c->n / (size_t)p.vec;
        size_t strips = (nv + (size_t)p.tn - 1) / (size_t)p.tn;
        l->groups = strips * (size_t)p.kg;
        if ((s = hd__fused_kg_buffers(f, ctx, &p, strips, c->m, c->c, &l->part, &l->count)) !=
            HD_OK)
            return s;
        return hd__fused_kernel(f, ctx, HD_FUSED_GEMV, options, "gemm_rows", l->group, &l->kernel);
    }
    if (c->variant != NULL)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "fused: the dot-form product takes no variant, not '%.100s'", c->variant);
    size_t mr = hd__fused_pow2_ceil(c->m > 0 ? c->m : 1), rpw = rows_per_slot(mr);
    int kw = warps_per_row(f, (c->n + rpw - 1) / rpw);
    snprintf(options, sizeof options, "-DWARPS=%d -DKW=%d -DMR=%zu -DVEC=%d -DRPW=%zu", NT_WARPS,
             kw, mr, c->k % 4 == 0 ? 4 : 1, rpw);
    size_t rows_per_group = (size_t)(NT_WARPS / kw) * rpw;
    l->group = NT_WARPS * 32;
    l->groups = (c->n + rows_per_group - 1) / rows_per_group;
    return hd__fused_kernel(f, ctx, HD_FUSED_GEMV_NT, options, "gemm_rows_nt", l->group,
                            &l->kernel);
}

hd_status hd__fused_rows_prepare(hd_fused *f, hd_context *ctx, const hd_fused_rows_call *c)
{
    rows_launch l;
    return setup(f, ctx, c, &l);
}

hd_status hd__fused_rows_gemm(hd_fused *f, hd_context *ctx, const hd_fused_rows_call *c)
{
    rows_launch l;
    hd_status s = setup(f, ctx, c, &l);
    if (s != HD_OK || c->m == 0 || c->n == 0)
        return s;
    int32_t m = (int32_t)c->m, n = (int32_t)c->n, k = (int32_t)c->k, k2 = (int32_t)c->k2;
    float alpha = c->alpha, beta = c->beta;
    if (!c->b_trans) {
        /* the scratch as of this setup: preparing later products may have replaced it */
        const void *values[] = {&m, &n, &k, &alpha, &c->a, &c->b, &beta, &c->c, &l.part, &l.count};
        const size_t sizes[] = {sizeof m,         sizeof n,          sizeof k,
                                sizeof alpha,     sizeof(hd_devmem), sizeof(hd_devmem),
                                sizeof beta,      sizeof(hd_devmem), sizeof(hd_devmem),
                                sizeof(hd_devmem)};
        s = hd__fused_set_args(ctx, l.kernel, values, sizes, 10);
    } else {
        /* without a second product its buffers are the first's, never read (k2 = 0) */
        hd_devmem a2 = c->k2 > 0 ? c->a2 : c->a, b2 = c->k2 > 0 ? c->b2 : c->b;
        const void *values[] = {&m, &n, &k, &alpha, &c->a, &c->b, &k2, &a2, &b2, &beta, &c->c};
        const size_t sizes[] = {sizeof m,     sizeof n,          sizeof k,
                                sizeof alpha, sizeof(hd_devmem), sizeof(hd_devmem),
                                sizeof k2,    sizeof(hd_devmem), sizeof(hd_devmem),
                                sizeof beta,  sizeof(hd_devmem)};
        s = hd__fused_set_args(ctx, l.kernel, values, sizes, 11);
    }
    return s == HD_OK ? hd__fused_launch(f, ctx, l.kernel, l.groups, l.group) : s;
}
