/*
 * The device runtime's vendor GEMM (cuBLASLt on the CUDA runtime) as the product engine of an
 * op whose own work is around its products: the LM head's cross-entropy runs its two products
 * there where the runtime has one, its rows kernel between them on the same stream.
 */
#include <limits.h>
#include <string.h>

#include "backends/fused/internal.h"
#include "core/error.h"

bool hd__fused_is_vendor_variant(const char *variant)
{
    return variant != NULL && strcmp(variant, HD_FUSED_VENDOR) == 0;
}

/* Why the vendor GEMM cannot take call here, or NULL where it can. Opens it on the first ask. */
static const char *refusal(const hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c)
{
    if (c->precision != HD_PRECISION_FP32 && c->precision != HD_PRECISION_TF32)
        return "it runs fp32 and tf32 products, not fp32x3";
    if (c->batch > 1 || c->k2 > 0)
        return "it runs one product a call, without a second (LoRA's) term";
    const size_t dims[] = {c->m, c->n, c->k, c->a.ld, c->b.ld, c->ldc};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i] > (size_t)INT_MAX)
            return "a size or leading dimension past 2^31 - 1";
    if (!hd__rt_vendor_gemm_ready(f->rt, ctx))
        return "the device runtime has none (cuBLASLt on the CUDA runtime)";
    return NULL;
}

bool hd__fused_vendor_takes(const hd_fused *f, hd_context *ctx, const hd_fused_tile_call *call)
{
    return refusal(f, ctx, call) == NULL;
}

hd_status hd__fused_vendor_check(const hd_fused *f, hd_context *ctx, const hd_fused_tile_call *call)
{
    const char *why = refusal(f, ctx, call);
    return why == NULL
               ? HD_OK
               : hd__error(ctx, HD_ERR_UNSUPPORTED, "fused: variant %s: %s", HD_FUSED_VENDOR, why);
}

static hd_rt_gemm rt_gemm_of(const hd_fused_tile_call *call)
{
    return (hd_rt_gemm){.m = call->m,
                        .n = call->n,
                        .k = call->k,
                        .a = call->a.mem,
                        .b = call->b.mem,
                        .c = call->c,
                        .lda = call->a.ld,
                        .ldb = call->b.ld,
                        .ldc = call->ldc,
                        .trans_a = call->a.trans,
                        .trans_b = call->b.trans,
                        .alpha = call->alpha,
                        .beta = call->beta,
                        .precision = call->precision};
}

hd_status hd__fused_vendor_prepare(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *call)
{
    hd_status s = hd__fused_vendor_check(f, ctx, call);
    const hd_rt_gemm g = rt_gemm_of(call);
    return s != HD_OK ? s : hd__rt_vendor_gemm_prepare(f->rt, ctx, &g);
}

hd_status hd__fused_vendor_gemm(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *call)
{
    hd_status s = hd__fused_vendor_check(f, ctx, call);
    const hd_rt_gemm g = rt_gemm_of(call);
    return s != HD_OK ? s : hd__rt_vendor_gemm(f->rt, ctx, &g);
}
