/*
 * The fused-kernel backend: the library's own OpenCL kernels, one launch per operation, on the
 * context's device. Tensors arrive device-resident; everything is queued, nothing waits.
 */
#include <limits.h>
#include <stdlib.h>

#include "backends/fused/fused.h"
#include "backends/fused/internal.h"

static bool fits_int(size_t a, size_t b)
{
    return b == 0 || a <= (size_t)INT_MAX / b;
}

static hd_status fused_probe(hd_context *ctx, void **state)
{
    *state = NULL;
    if (ctx->cl == NULL)
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE,
                         "fused: the context has no OpenCL device");
    hd_fused *f = calloc(1, sizeof *f);
    if (f == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "fused: backend state");
    cl_int err = clGetDeviceInfo(hd__cl_device(ctx->cl), CL_DEVICE_MAX_WORK_GROUP_SIZE,
                                 sizeof f->device_max_group, &f->device_max_group, NULL);
    cl_uint units = 0;
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(hd__cl_device(ctx->cl), CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units,
                              &units, NULL);
    f->compute_units = units;
    f->ctx = ctx;
    hd__fused_tile_probe(f, hd__cl_device(ctx->cl));
    hd_status s = err == CL_SUCCESS ? hd__fused_sources_create(f)
                                    : hd__cl_error(ctx, err, "clGetDeviceInfo");
    if (s != HD_OK) {
        hd__fused_sources_destroy(f);
        free(f);
        return s == HD_ERR_OUT_OF_MEMORY ? hd__error(ctx, s, "fused: kernel sources") : s;
    }
    *state = f;
    return HD_OK;
}

static void fused_destroy(void *state)
{
    hd_fused *f = state;
    if (f == NULL)
        return;
    hd__fused_sources_destroy(f); /* kernels and programs belong to the runtime */
    if (f->lora_part != NULL)
        clReleaseMemObject(f->lora_part);
    hd__fused_kg_release(f);
    hd__fused_tile_release(f);
    if (f->lora_u != NULL)
        clReleaseMemObject(f->lora_u);
    free(f);
}

static bool fused_supports(void *state, hd_op op, const hd_shape *s)
{
    switch (op) {
    case HD_OP_GEMM: /* m, n, k: the strip kernel's 32-bit indexing, or the tiled engine's */
    case HD_OP_GEMM_BATCHED:
        return s->dim[0] <= INT_MAX && s->dim[1] <= INT_MAX && s->dim[2] <= INT_MAX;
    case HD_OP_LORA: /* tokens, in, out, rank: the strip kernels' limits, or the tiled engine's */
        if (s->dim[0] <= 16 && s->dim[3] <= 64 && fits_int(s->dim[1], s->dim[2]) &&
            hd__fused_lora_update_supports(s))
            return true;
        return s->dim[0] <= INT_MAX && s->dim[1] <= INT_MAX && s->dim[2] <= INT_MAX &&
               s->dim[3] <= INT_MAX;
    case HD_OP_SOFTMAX:
    case HD_OP_LAYER_NORM:
    case HD_OP_RMS_NORM:
        return s->dim[0] <= INT_MAX && s->dim[1] <= INT_MAX;
    default: /* batched GEMM and anything newer: not offered here */
        break;
    }
    return false;
}

/* Row kernels: register variants whose capacity (T * VEC * CACHE elements) holds the row
 * without being more than four times too large, and looped ones for every length. The
 * one-warp slots (T = 32) reduce in two steps without waiting on other warps: for short rows,
 * where the reductions and not the bytes set the time. */
static size_t row_variants(const hd_fused *f, const hd_shape *s, const char **out, size_t max)
{
    static const struct {
        const char *text;
        int wg, rows, cache;
    } all[] = {
        {"WG=256 ROWS=8 CACHE=2", 256, 8, 2},   {"WG=256 ROWS=8 CACHE=4", 256, 8, 4},
        {"WG=256 ROWS=4 CACHE=2", 256, 4, 2},   {"WG=256 ROWS=4 CACHE=4", 256, 4, 4},
        {"WG=128 ROWS=2 CACHE=4", 128, 2, 4},   {"WG=256 ROWS=2 CACHE=4", 256, 2, 4},
        {"WG=256 ROWS=2 CACHE=8", 256, 2, 8},   {"WG=256 ROWS=1 CACHE=4", 256, 1, 4},
        {"WG=256 ROWS=1 CACHE=8", 256, 1, 8},   {"WG=512 ROWS=1 CACHE=2", 512, 1, 2},
        {"WG=512 ROWS=1 CACHE=4", 512, 1, 4},   {"WG=512 ROWS=1 CACHE=8", 512, 1, 8},
        {"WG=1024 ROWS=1 CACHE=4", 1024, 1, 4}, {"WG=1024 ROWS=1 CACHE=8", 1024, 1, 8},
        {"WG=32 ROWS=1 CACHE=8", 32, 1, 8},     {"WG=64 ROWS=2 CACHE=8", 64, 2, 8},
        {"WG=64 ROWS=1 CACHE=4", 64, 1, 4},     {"WG=256 ROWS=8 CACHE=8", 256, 8, 8},
        {"WG=256 ROWS=4 CACHE=0", 256, 4, 0},   {"WG=256 ROWS=1 CACHE=0", 256, 1, 0},
        {"WG=512 ROWS=1 CACHE=0", 512, 1, 0},   {"WG=1024 ROWS=1 CACHE=0", 1024, 1, 0},
    };
    size_t cols = s->dim[1], vec = cols % 4 == 0 ? 4 : 1, n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && n < max; i++) {
        size_t cap = (size_t)(all[i].wg / all[i].rows) * vec * (size_t)all[i].cache;
        if ((size_t)all[i].wg > f->device_max_group)
            continue;
        if (all[i].cache > 0 && (cap < cols || cap / 4 >= cols))
            continue;
        out[n++] = all[i].text;
    }
    return n;
}

static size_t fused_variants(void *state, hd_op op, const hd_shape *s, const char **out, size_t max)
{
    static const char *const gemv[] = {
        "TN=4 KS=64 UNROLL=16", "TN=4 KS=64 UNROLL=8",  "TN=2 KS=128 UNROLL=8",
        "TN=8 KS=32 UNROLL=8",  "TN=4 KS=32 UNROLL=8",  "TN=8 KS=64 UNROLL=4",
        "TN=16 KS=16 UNROLL=8", "TN=4 KS=128 UNROLL=4", "TN=32 KS=8 UNROLL=8",
        "TN=32 KS=8 UNROLL=16",
    };
    /* k split over work-groups per strip (KG=1: none), beside the default chosen by shape;
     * wide strips leave few strips, so they take the largest splits */
    static const char *const kgroups[] = {
        "KG=1",
        "KG=2",
        "KG=4",
        "KG=8",
        "UNROLL=4 KG=8",
        "UNROLL=4 KG=16",
        "TN=8 KS=32 UNROLL=8 KG=4",
        "TN=8 KS=32 UNROLL=4 KG=16",
        "TN=16 KS=16 UNROLL=4 KG=32",
        "TN=32 KS=8 UNROLL=8 KG=32",
        "TN=16 KS=16 UNROLL=16 KG=16",
        "TN=64 KS=4 UNROLL=16 KG=32",
    };
    /* LoRA: x*A in the same launch or in its own, with the default strip and with wide strips
     * split many ways over k (few strips recompute the prologue, many k-groups shorten it) */
    static const char *const lora_split[] = {
        "SPLIT=0",
        "SPLIT=4",
        "SPLIT=16",
        "SPLIT=64",
        "TN=16 KS=16 UNROLL=4 SPLIT=0",
        "TN=16 KS=16 UNROLL=4 KG=32 SPLIT=0",
        "TN=8 KS=32 UNROLL=4 KG=16 SPLIT=0",
        "TN=32 KS=8 UNROLL=4 KG=32 SPLIT=0",
    };
    const hd_fused *f = state;
    size_t n = 0;
    switch (op) {
    case HD_OP_GEMM_BATCHED:
        return hd__fused_tile_variants(f, s, f->ctx->gemm_precision, out, max);
    case HD_OP_GEMM:
    case HD_OP_LORA:
        if (op == HD_OP_GEMM && (s->dim[0] > 16 || s->trans_a || s->trans_b))
            return hd__fused_tile_variants(f, s, f->ctx->gemm_precision, out, max);
        if (op == HD_OP_LORA && (s->dim[0] > 16 || s->dim[3] > 64)) {
            hd_shape xw = {.dim = {s->dim[0], s->dim[2], s->dim[1]}}; /* tokens x out, k = in */
            return hd__fused_tile_variants(f, &xw, f->ctx->gemm_precision, out, max);
        }
        for (size_t i = 0; i < sizeof gemv / sizeof gemv[0] && n < max; i++)
            out[n++] = gemv[i];
        for (size_t i = 0; i < sizeof kgroups / sizeof kgroups[0] && n < max; i++)
            out[n++] = kgroups[i];
        for (size_t i = 0; op == HD_OP_LORA && s->dim[3] > 0 &&
                           i < sizeof lora_split / sizeof lora_split[0] && n < max;
             i++)
            out[n++] = lora_split[i];
        if (op == HD_OP_LORA && s->dim[0] > 1) { /* several tokens: the tiled engine too */
            hd_shape xw = {.dim = {s->dim[0], s->dim[2], s->dim[1]}};
            n += hd__fused_tile_variants(f, &xw, f->ctx->gemm_precision, out + n, max - n);
        }
        return n;
    case HD_OP_SOFTMAX:
    case HD_OP_LAYER_NORM:
    case HD_OP_RMS_NORM:
        return row_variants(f, s, out, max);
    default: /* batched GEMM and anything newer: not offered here */
        break;
    }
    return 0;
}

/* The parameter checks of each slot, without the build (gemm.c, lora.c, rows.c). */
static hd_status fused_check_variant(void *state, hd_context *ctx, hd_op op, const hd_shape *s,
                                     const char *variant)
{
    hd_fused *f = state;
    hd_fused_params p;
    bool cached;
    const hd_lora_args lora = {
        .tokens = s->dim[0], .in = s->dim[1], .out = s->dim[2], .rank = s->dim[3]};
    switch (op) {
    case HD_OP_GEMM: /* m, n, k; as hd__fused_gemm chooses between its two kernels */
    case HD_OP_GEMM_BATCHED:
        if (op == HD_OP_GEMM_BATCHED || hd__fused_is_tile_variant(variant)) {
            size_t m = s->dim[0], n = s->dim[1], k = s->dim[2];
            const hd_fused_tile_call c = {
                .m = m,
                .n = n,
                .k = k,
                .batch = op == HD_OP_GEMM_BATCHED ? s->dim[3] : 1,
                .a = {NULL, s->trans_a ? m : k, s->trans_a},
                .b = {NULL, s->trans_b ? k : n, s->trans_b},
                .ldc = n,
                .precision = ctx->gemm_precision,
                .variant = variant,
            };
            return hd__fused_tile_check(f, ctx, &c);
        }
        if (s->dim[0] > 16 || s->trans_a || s->trans_b)
            return hd__error(ctx, HD_ERR_UNSUPPORTED,
                             "fused: GEMM takes at most 16 rows and no transposes");
        return hd__fused_gemv_params(f, ctx, variant, s->dim[1], s->dim[2], s->dim[0], NULL, &p);
    case HD_OP_LORA: /* as hd__fused_lora chooses: the tiled x*W (+ u*B) or the strip kernel */
        if (hd__fused_is_tile_variant(variant)) {
            const hd_fused_tile_call c = {
                .m = lora.tokens,
                .n = lora.out,
                .k = lora.in,
                .k2 = lora.rank,
                .batch = 1,
                .a = {NULL, lora.in, false},
                .b = {NULL, lora.out, false},
                .a2 = {NULL, lora.rank, false},
                .b2 = {NULL, lora.out, false},
                .ldc = lora.out,
                .precision = ctx->gemm_precision,
                .variant = variant,
            };
            return hd__fused_tile_check(f, ctx, &c);
        }
        if (lora.tokens > 16 || lora.rank > 64)
            return hd__error(ctx, HD_ERR_UNSUPPORTED,
                             "fused: LoRA forward takes at most 16 tokens and rank 64");
        return hd__fused_gemv_params(f, ctx, variant, lora.out, lora.in, lora.tokens, &lora, &p);
    case HD_OP_SOFTMAX:
    case HD_OP_LAYER_NORM:
    case HD_OP_RMS_NORM:
        return hd__fused_rows_params(f, ctx, variant, s->dim[1], &p, &cached);
    default:
        break;
    }
    return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "fused: %s takes no variants", hd_op_name(op));
}

/* Builds the programs of the default parameters for common shapes: rows of 1024 and 4096
 * floats, one-token GEMM and LoRA, and the epilogue. */
static hd_status fused_warmup(void *state, hd_context *ctx)
{
    static const size_t row_cols[] = {1024, 4096};
    hd_fused *f = state;
    hd_status s = HD_OK;
    for (size_t i = 0; i < 2 && s == HD_OK; i++) {
        hd_fused_params p;
        bool cached;
        s = hd__fused_rows_params(f, ctx, NULL, row_cols[i], &p, &cached);
        char options[HD_FUSED_OPTIONS_CAPACITY];
        hd__fused_options(HD_FUSED_FAMILY_ROWS, &p, 0, options);
        static const char *const names[][2] = {{"softmax_cached", "softmax_looped"},
                                               {"layer_norm_cached", "layer_norm_looped"},
                                               {"rms_norm_cached", "rms_norm_looped"}};
        for (int op = 0; op < 3 && s == HD_OK; op++) {
            cl_kernel k;
            s = hd__fused_kernel(f, ctx, (hd_fused_program)(HD_FUSED_SOFTMAX + op), options,
                                 names[op][cached ? 0 : 1], (size_t)p.wg, &k);
        }
    }
    /* One-token GEMM and LoRA at 4096 columns (LoRA at rank 8: the one-launch kernel). */
    const hd_lora_args lora = {.tokens = 1, .in = 4096, .out = 4096, .rank = 8};
    for (int which = 0; which < 2 && s == HD_OK; which++) {
        hd_fused_params p;
        s = hd__fused_gemv_params(f, ctx, NULL, 4096, 4096, 1, which ? &lora : NULL, &p);
        if (s != HD_OK)
            break;
        char options[HD_FUSED_OPTIONS_CAPACITY];
        hd__fused_options(HD_FUSED_FAMILY_GEMV, &p, 1, options);
        cl_kernel k;
        size_t group = (size_t)p.tn * (size_t)p.ks;
        s = hd__fused_kernel(f, ctx, which ? HD_FUSED_LORA : HD_FUSED_GEMV, options,
                             which ? "lora_forward" : "gemm_rows", group, &k);
    }
    hd_fused_params p;
    if (s == HD_OK)
        s = hd__fused_update_params(f, ctx, NULL, 4096, &p);
    if (s == HD_OK) {
        char options[HD_FUSED_OPTIONS_CAPACITY];
        hd__fused_options(HD_FUSED_FAMILY_UPDATE, &p, 0, options);
        cl_kernel k;
        s = hd__fused_kernel(f, ctx, HD_FUSED_LORA_UPDATE, options, "lora_update", (size_t)p.wg,
                             &k);
    }
    return s;
}

static bool fused_runs_precision(void *state, hd_precision p)
{
    const hd_fused *f = state;
    return p == HD_PRECISION_FP32 || (f != NULL && f->mma && !f->mma_broken);
}

const hd_backend_impl hd__backend_fused = {
    .name = "fused",
    .id = HD_BACKEND_FUSED,
    .place = HD_PLACE_DEVICE,
    .probe = fused_probe,
    .destroy = fused_destroy,
    .supports = fused_supports,
    .variants = fused_variants,
    .runs_precision = fused_runs_precision,
    .check_variant = fused_check_variant,
    .warmup = fused_warmup,
    .gemm = hd__fused_gemm,
    .gemm_batched = hd__fused_gemm_batched,
    .lora = hd__fused_lora,
    .softmax = hd__fused_softmax,
    .layer_norm = hd__fused_layer_norm,
    .rms_norm = hd__fused_rms_norm,
};
