/* The CLBlast backend and the CLBlast+fused hybrid plan: probe, warm-up, tuner variants. */
#include <stdlib.h>
#include <string.h>

#include "backends/clblast/clblast.h"
#include "backends/fused/fused.h"
#include "dispatch/context.h"
#include "dispatch/error.h"

static hd_status clblast_probe(hd_context *ctx, void **state)
{
    *state = NULL;
    if (ctx->cl == NULL)
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE, "clblast: no OpenCL device");
    hd_clblast_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "clblast: no memory for the backend state");
    hd_status s = hd__clblast_device_query(ctx, ctx->cl, &st->dev);
    if (s != HD_OK) {
        free(st);
        return s == HD_ERR_OUT_OF_MEMORY ? s : HD_ERR_BACKEND_UNAVAILABLE;
    }
    /* The base set: what CLBlast would run, with this device's known-good sets laid over it.
     * Nothing reaches CLBlast before the first call verifies the combination. */
    hd__clblast_params_shipped(&st->dev, &st->base);
    for (int k = 0; k < HD_CLBLAST_KERNEL_COUNT; k++) {
        hd_clblast_params known;
        if (hd__clblast_params_known(&st->dev, (hd_clblast_kernel)k, &known, 1) == 1)
            hd__clblast_params_merge(&st->base, &known);
    }
    *state = st;
    return HD_OK;
}

static void clblast_destroy(void *state)
{
    free(state);
}

/* The tuner's candidates: Xgemm sets for problems that take the indirect path under the base
 * threshold, XgemmDirect sets for the rest. */
static size_t clblast_variants(void *state, hd_op op, const hd_shape *shape, const char **out,
                               size_t max)
{
    hd_clblast_state *st = state;
    if (op != HD_OP_GEMM && op != HD_OP_LORA)
        return 0;
    /* GEMM (m, n, k) and LoRA (tokens, in, out): the largest product is the first three. */
    double flops = (double)shape->dim[0] * (double)shape->dim[1] * (double)shape->dim[2];
    double t = (double)st->base.min_indirect_size;
    hd_clblast_kernel kernel = flops >= t * t * t ? HD_CLBLAST_XGEMM : HD_CLBLAST_XGEMM_DIRECT;
    enum { CAP = sizeof st->variant_text / sizeof st->variant_text[0] };
    hd_clblast_params sets[CAP];
    size_t n = hd__clblast_params_enumerate(&st->dev, kernel, sets, max < CAP ? max : CAP);
    for (size_t i = 0; i < n; i++) {
        hd__clblast_params_format(&sets[i], st->variant_text[i], sizeof st->variant_text[i]);
        out[i] = st->variant_text[i];
    }
    return n;
}

/* The set a call would run (the variant laid over the base set) must parse and be legal for
 * this device; whether CLBlast then accepts it is known only when the first call verifies it. */
static hd_status clblast_check_variant(void *state, hd_context *ctx, hd_op op,
                                       const hd_shape *shape, const char *variant)
{
    hd_clblast_state *st = state;
    (void)shape;
    if (op != HD_OP_GEMM && op != HD_OP_LORA && op != HD_OP_GEMM_BATCHED)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "CLBlast: %s takes no variants",
                         hd_op_name(op));
    hd_clblast_params over, want = st->base;
    hd_status s = hd__clblast_params_parse(ctx, variant, &over);
    if (s != HD_OK)
        return s;
    hd__clblast_params_merge(&want, &over);
    char why[200];
    if (!hd__clblast_params_legal(&want, &st->dev, why, sizeof why))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "illegal CLBlast parameter set (%s): %.200s",
                         why, variant);
    return HD_OK;
}

/* One GEMM of m×n×k on pooled buffers whose contents do not matter. Lock held. */
static hd_status scratch_gemm(hd_context *ctx, size_t m, size_t n, size_t k, size_t batch)
{
    struct hd_device_buffer *buf[3] = {NULL, NULL, NULL};
    size_t bytes[3] = {batch * m * k * 4, batch * k * n * 4, batch * m * n * 4};
    hd_status s = HD_OK;
    for (int i = 0; i < 3 && s == HD_OK; i++)
        s = hd__cl_buffer_acquire(ctx->cl, ctx, bytes[i], &buf[i]);
    if (s == HD_OK && batch == 1) {
        s = hd__clblast_sgemm(ctx, true, false, false, m, n, k, 1.0f, buf[0]->mem, 0, k,
                              buf[1]->mem, 0, n, 0.0f, buf[2]->mem, 0, n);
    } else if (s == HD_OK) {
        cl_command_queue queue = hd__cl_queue(ctx->cl);
        CLBlastStatusCode code = CLBlastSgemmStridedBatched(
            CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n, k, 1.0f,
            buf[0]->mem, 0, k, m * k, buf[1]->mem, 0, n, k * n, 0.0f, buf[2]->mem, 0, n, m * n,
            batch, &queue, NULL);
        if (code != CLBlastSuccess)
            s = hd__clblast_error(ctx, code, "CLBlastSgemmStridedBatched (warm-up)");
    }
    if (s == HD_OK)
        s = hd__cl_finish(ctx->cl, ctx);
    for (int i = 0; i < 3; i++)
        if (buf[i] != NULL)
            hd__cl_buffer_release(ctx->cl, buf[i]);
    return s;
}

/* CLBlast compiles a program per OpenCL context and routine on first use: the direct and
 * indirect paths of GEMM share one, the batched routine has its own. */
static hd_status clblast_warmup(void *state, hd_context *ctx)
{
    hd_clblast_state *st = state;
    hd__clblast_lock();
    hd_status s = hd__clblast_prepare(st, ctx, NULL);
    size_t t = st->base.min_indirect_size;
    if (s == HD_OK)
        s = scratch_gemm(ctx, 8, 8, 8, 1);
    if (s == HD_OK)
        s = scratch_gemm(ctx, t + 1, t + 1, t + 1, 1);
    if (s == HD_OK)
        s = scratch_gemm(ctx, 8, 8, 8, 2);
    hd__clblast_unlock();
    return s;
}

const hd_backend_impl hd__backend_clblast = {
    .name = "clblast",
    .id = HD_BACKEND_CLBLAST,
    .place = HD_PLACE_DEVICE,
    .probe = clblast_probe,
    .destroy = clblast_destroy,
    .variants = clblast_variants,
    .check_variant = clblast_check_variant,
    .warmup = clblast_warmup,
    .gemm = hd__clblast_gemm,
    .gemm_batched = hd__clblast_gemm_batched,
    .lora = hd__clblast_lora,
};

/* The hybrid plan owns nothing: it borrows the CLBlast and fused states, which the registry
 * probes before it and destroys after it. */
static hd_status clblast_fused_probe(hd_context *ctx, void **state)
{
    *state = NULL;
    if (ctx->backends[HD_BACKEND_CLBLAST] == NULL || ctx->backends[HD_BACKEND_FUSED] == NULL)
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE,
                         "clblast+fused: needs both the CLBlast and the fused backend");
    return HD_OK;
}

/* The plan takes what the fused epilogue takes; CLBlast's GEMM takes any shape. */
static bool clblast_fused_supports(void *state, hd_op op, const hd_shape *shape)
{
    (void)state;
    return op == HD_OP_LORA && hd__fused_lora_update_supports(shape);
}

/* The variants are the epilogue's: CLBlast runs its base parameters in this plan. */
static size_t clblast_fused_variants(void *state, hd_op op, const hd_shape *shape, const char **out,
                                     size_t max)
{
    (void)state;
    return op == HD_OP_LORA ? hd__fused_lora_update_variants(shape, out, max) : 0;
}

/* The variant is the epilogue's (hd__clblast_fused_lora). */
static hd_status clblast_fused_check_variant(void *state, hd_context *ctx, hd_op op,
                                             const hd_shape *shape, const char *variant)
{
    (void)state;
    if (op != HD_OP_LORA)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "clblast+fused: %s takes no variants",
                         hd_op_name(op));
    const hd_lora_args l = {.tokens = shape->dim[0],
                            .in = shape->dim[1],
                            .out = shape->dim[2],
                            .rank = shape->dim[3],
                            .variant = variant};
    return hd__fused_lora_update_check(ctx->backend_state[HD_BACKEND_FUSED], ctx, &l);
}

const hd_backend_impl hd__backend_clblast_fused = {
    .name = "clblast+fused",
    .id = HD_BACKEND_CLBLAST_FUSED,
    .place = HD_PLACE_DEVICE,
    .probe = clblast_fused_probe,
    .supports = clblast_fused_supports,
    .variants = clblast_fused_variants,
    .check_variant = clblast_fused_check_variant,
    .lora = hd__clblast_fused_lora,
};
