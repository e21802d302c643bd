/*
 * The fused-kernel backend: the library's own OpenCL kernels, one launch per operation, on the
 * context's device. Tensors arrive device-resident; everything is queued, nothing waits.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/fused/fused.h"
#include "backends/fused/internal.h"
#include "core/op.h"

/* Without a calibration: the launch cost of a typical OpenCL driver and a mid-range GPU. */
#define DEFAULT_LAUNCH_US     10.0
#define DEFAULT_DEVICE_GFLOPS 1000.0
#define DEFAULT_DEVICE_GBPS   100.0
/* The GEMV-style kernels stream the weights at copy bandwidth but are not tiled for reuse:
 * a quarter of the device's GEMM rate where the arithmetic, not the weights, sets the time.
 * The tiled engine (tile.c) runs at the rate the calibration measured on its default
 * parameters, or where that is missing (a cache of an older calibration) is taken to reach
 * half the rate of the best GEMM the calibration saw: a guess from before its tiles were
 * tuned, which sends a large product left without a record to CLBlast even where the tiled
 * engine is the faster (LoRA backward at 4096 tokens in PyTorch's layout: commit 09b1228);
 * the tuner's records replace these guesses. */
#define GEMV_RATE_FRACTION 0.25
#define TILE_RATE_FRACTION 0.5

static bool fits_int(size_t a, size_t b)
{
    return b == 0 || a <= (size_t)INT_MAX / b;
}

static hd_status fused_probe(hd_context *ctx, const hd_backend_setup *setup, void **state)
{
    *state = NULL;
    if (setup->device == NULL)
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE, "fused: the context has no device");
    hd_fused *f = calloc(1, sizeof *f);
    if (f == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "fused: backend state");
    const hd_runtime_info *info = hd__rt_info(setup->device);
    f->device_max_group = info->max_group;
    f->compute_units = info->compute_units;
    f->clusters = info->clusters;
    f->param_bytes = info->param_bytes;
    f->logits_bytes = HD_FUSED_LOGITS_BYTES;
    f->index32_limit = INT_MAX;
    f->rt = setup->device;
    f->deterministic = setup->deterministic;
    hd__fused_tile_probe(f, info);
    hd_status s = hd__fused_sources_create(f);
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
    hd__rt_scratch_free(f->rt, f->lora_part);
    hd__fused_kg_release(f);
    hd__fused_tile_release(f);
    hd__fused_tables_release(f);
    hd__rt_scratch_free(f->rt, f->lora_u);
    hd__rt_scratch_free(f->rt, f->backward_stats);
    hd__rt_scratch_free(f->rt, f->backward_parts);
    free(f);
}

/* The tiled engine's limits: sizes its 32-bit indices reach, and for LoRA W and B transposed
 * alike (its second product, u*B, shares the first's transposes). */
static bool tile_takes(hd_op op, const hd_shape *s)
{
    bool lora = op == HD_OP_LORA || op == HD_OP_LORA_BACKWARD;
    if (op == HD_OP_LORA &&
        !(s->lora_layout & HD_LORA_TRANS_W) != !(s->lora_layout & HD_LORA_TRANS_B))
        return false;
    return s->dim[0] <= INT_MAX && s->dim[1] <= INT_MAX && s->dim[2] <= INT_MAX &&
           (!lora || s->dim[3] <= INT_MAX);
}

/* The strip kernels' limits: GEMM's, 32-bit sizes; LoRA's (tokens, in, out, rank), W's
 * elements and the epilogue's. */
static bool strip_takes(hd_op op, const hd_shape *s)
{
    if (op != HD_OP_LORA)
        return tile_takes(op, s);
    return fits_int(s->dim[1], s->dim[2]) && hd__fused_lora_update_supports(s);
}

/* Each family by its own limits: the dot form's calls by the tiled engine's, which runs them
 * past the dot form's; the strip family's by its own or the tiled engine's. */
static bool fused_supports(void *state, hd_op op, const hd_shape *s, hd_part part)
{
    switch (hd__fused_route(state, op, s, part, NULL)) {
    case HD_FUSED_ROUTE_EPILOGUE: /* y += scale*(x*A)*B reads A and B in the default layout */
        return !(s->lora_layout & (HD_LORA_TRANS_A | HD_LORA_TRANS_B)) &&
               hd__fused_lora_update_supports(s);
    case HD_FUSED_ROUTE_STRIP:
        return strip_takes(op, s) || tile_takes(op, s);
    case HD_FUSED_ROUTE_DOT:
    case HD_FUSED_ROUTE_TILE:
    case HD_FUSED_ROUTE_FEW_TOKENS: /* LoRA backward: the tiled engine's 32-bit indices */
        return tile_takes(op, s);
    case HD_FUSED_ROUTE_ROWS:
        return s->dim[0] <= INT_MAX && s->dim[1] <= INT_MAX;
    case HD_FUSED_ROUTE_ROWS_BACKWARD: /* and 3 x rows floats of statistics, 32-bit indices */
        return s->dim[0] <= INT_MAX / 3 && s->dim[1] <= INT_MAX;
    case HD_FUSED_ROUTE_STEP:
        return hd__fused_step_supports(op, s);
    case HD_FUSED_ROUTE_NONE:
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

/* Appends v to the n variants in out unless it is there already or out is full. */
static size_t add_unique(const char **out, size_t n, size_t max, const char *v)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(out[i], v) == 0)
            return n;
    if (n < max)
        out[n++] = v;
    return n;
}

/* The strip kernels' variants (GEMM of few rows, LoRA of few tokens in the default layout),
 * the likeliest winners first, so that a tuner out of time has timed them; for LoRA of several
 * tokens the tiled engine's after them. */
static size_t strip_variants(const hd_fused *f, hd_op op, const hd_shape *s, const char **out,
                             size_t max)
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
    /* LoRA: x*A in its own launch (the default computes it in the same one), and wide strips
     * split many ways over k (few strips recompute the prologue, many k-groups shorten it);
     * add_unique drops those the lists above hold already */
    static const char *const lora_split[] = {
        "SPLIT=4",
        "SPLIT=16",
        "SPLIT=64",
        "TN=16 KS=16 UNROLL=4",
        "TN=16 KS=16 UNROLL=4 KG=32",
        "TN=8 KS=32 UNROLL=4 KG=16",
        "TN=32 KS=8 UNROLL=4 KG=32",
    };
    /* several tokens of LoRA, whose x*A rides along the pass in strips as wide as the rank:
     * the widest strips first, the fastest on the larger weights (commit 1f2aa2c) */
    static const char *const several_tokens_lora[] = {"TN=128 KS=2 UNROLL=8", "TN=64 KS=4 UNROLL=8",
                                                      "TN=64 KS=4 UNROLL=16"};
    /* several rows: the two default strips (32 vectors by 8 k-slices, 4 loads per round; 64
     * by 4, 8 loads), each split a few ways over k, come first (they beat 32 k-groups at 4 to
     * 16 rows of 4096^2: commit 3c79119), then other strips; LoRA takes its x*A in the same
     * launch, over each group's k-range, or in its own */
    static const char *const several_rows[] = {
        "TN=32 KS=8 UNROLL=4 KG=8",         "TN=64 KS=4 UNROLL=8 KG=8",
        "TN=32 KS=8 UNROLL=4 KG=4",         "TN=64 KS=4 UNROLL=8 KG=4",
        "TN=32 KS=8 UNROLL=4 KG=16",        "TN=64 KS=4 UNROLL=8 KG=16",
        "TN=32 KS=8 UNROLL=8 KG=8",         "TN=64 KS=4 UNROLL=16 KG=8",
        "TN=32 KS=8 UNROLL=4 KG=2",         "TN=64 KS=4 UNROLL=8 KG=2",
        "TN=64 KS=4 UNROLL=8 KG=8 SPLIT=8", "TN=32 KS=8 UNROLL=8 KG=16 SPLIT=8",
    };
    /* one row: the strips that won where a sweep timed every variant (commit 4d6efe3: gemm
     * 1x16384x4096 and 1x4096x4096, lora 1x4096x4096 and 1x8192x8192 r16): for GEMM, strips
     * whose quarter-warps read 128 contiguous bytes of a row of W; for LoRA, wide strips split
     * many ways over k, which shortens each group's share of x*A */
    static const char *const one_row_gemm[] = {"TN=8 KS=32 UNROLL=8 KG=4", "TN=32 KS=8 UNROLL=8",
                                               "TN=16 KS=16 UNROLL=8"};
    static const char *const one_row_lora[] = {"TN=64 KS=4 UNROLL=16 KG=32",
                                               "TN=16 KS=16 UNROLL=4 KG=32"};
    bool lora = op == HD_OP_LORA, low_rank = lora && s->dim[3] > 0;
    bool one_row = s->dim[0] == 1, several = s->dim[0] > 1;
    size_t n = 0;
    for (size_t i = 0;
         several && low_rank && i < sizeof several_tokens_lora / sizeof several_tokens_lora[0]; i++)
        n = add_unique(out, n, max, several_tokens_lora[i]);
    for (size_t i = 0; several && i < sizeof several_rows / sizeof several_rows[0]; i++)
        if (lora ? low_rank : strstr(several_rows[i], "SPLIT") == NULL)
            n = add_unique(out, n, max, several_rows[i]);
    for (size_t i = 0; one_row && !lora && i < sizeof one_row_gemm / sizeof one_row_gemm[0]; i++)
        n = add_unique(out, n, max, one_row_gemm[i]);
    for (size_t i = 0; one_row && low_rank && i < sizeof one_row_lora / sizeof one_row_lora[0]; i++)
        n = add_unique(out, n, max, one_row_lora[i]);
    for (size_t i = 0; i < sizeof gemv / sizeof gemv[0]; i++)
        n = add_unique(out, n, max, gemv[i]);
    for (size_t i = 0; i < sizeof kgroups / sizeof kgroups[0]; i++)
        n = add_unique(out, n, max, kgroups[i]);
    for (size_t i = 0; low_rank && i < sizeof lora_split / sizeof lora_split[0]; i++)
        n = add_unique(out, n, max, lora_split[i]);
    if (lora && several) { /* several tokens: the tiled engine too */
        hd_shape xw = {.dim = {s->dim[0], s->dim[2], s->dim[1]}};
        n += hd__fused_tile_variants(f, &xw, s->precision, out + n, max - n);
    }
    return n;
}

/* The tiled engine's variants for the op's tiled product: GEMM's own; LoRA's x*W (tokens x
 * out, in deep); LoRA backward's dx = dy*W^T (+ u*A^T), the largest of its products. */
static size_t tile_variants(const hd_fused *f, hd_op op, const hd_shape *s, const char **out,
                            size_t max)
{
    hd_shape product = *s;
    if (op == HD_OP_LORA)
        product = (hd_shape){.dim = {s->dim[0], s->dim[2], s->dim[1]}};
    else if (op == HD_OP_LORA_BACKWARD)
        product = (hd_shape){.dim = {s->dim[0], s->dim[1], s->dim[2]},
                             .trans_b = !(s->lora_layout & HD_LORA_TRANS_W)};
    return hd__fused_tile_variants(f, &product, s->precision, out, max);
}

/* The row ops' backward: work-group size and rows per group (the looped row kernels: CACHE
 * does not apply). */
static size_t row_backward_variants(const hd_fused *f, const char **out, size_t max)
{
    static const char *const backward[] = {"WG=256 ROWS=4", "WG=256 ROWS=1", "WG=512 ROWS=1",
                                           "WG=1024 ROWS=1", "WG=64 ROWS=1"};
    static const size_t backward_wg[] = {256, 256, 512, 1024, 64};
    size_t n = 0;
    for (size_t i = 0; i < sizeof backward / sizeof backward[0] && n < max; i++)
        if (backward_wg[i] <= f->device_max_group)
            out[n++] = backward[i];
    return n;
}

/* The variants of the family that runs the call's defaults; where that is the dot form, which
 * takes none, GEMM's tiled engine is timed against it. LoRA backward's variants are its tiled
 * engine's, which a variant makes it run. */
static size_t fused_variants(void *state, hd_op op, const hd_shape *s, hd_part part,
                             const char **out, size_t max)
{
    const hd_fused *f = state;
    switch (hd__fused_route(f, op, s, part, NULL)) {
    case HD_FUSED_ROUTE_EPILOGUE:
        return hd__fused_lora_update_variants(s, out, max);
    case HD_FUSED_ROUTE_STRIP:
        return strip_variants(f, op, s, out, max);
    case HD_FUSED_ROUTE_DOT:
        return op == HD_OP_GEMM ? tile_variants(f, op, s, out, max) : 0;
    case HD_FUSED_ROUTE_TILE:
    case HD_FUSED_ROUTE_FEW_TOKENS:
        return tile_variants(f, op, s, out, max);
    case HD_FUSED_ROUTE_ROWS:
        return row_variants(f, s, out, max);
    case HD_FUSED_ROUTE_ROWS_BACKWARD:
        return row_backward_variants(f, out, max);
    case HD_FUSED_ROUTE_STEP:
        return hd__fused_step_variants(f, op, s, out, max);
    case HD_FUSED_ROUTE_NONE:
        break;
    }
    return 0;
}

/* A tiled product's check, and with ahead its program queued on the build-ahead workers. */
static hd_status tile_check(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c, bool ahead)
{
    return ahead ? hd__fused_tile_build_ahead(f, ctx, c) : hd__fused_tile_check(f, ctx, c);
}

/* The tiled engine's check of the op's tiled product for variant: GEMM's own; LoRA's
 * y = x*W + u*B, read in the default layout; LoRA backward's dx = dy*W^T (+ u*A^T). */
static hd_status tile_check_variant(hd_fused *f, hd_context *ctx, hd_op op, const hd_shape *s,
                                    const char *variant, bool ahead)
{
    if (op == HD_OP_LORA_BACKWARD) {
        hd_fused_tile_call dx = hd__fused_lora_backward_dx_call(ctx, s, variant);
        return tile_check(f, ctx, &dx, ahead);
    }
    if (op == HD_OP_LORA) {
        size_t tokens = s->dim[0], in = s->dim[1], out = s->dim[2], rank = s->dim[3];
        const hd_fused_tile_call c = {
            .m = tokens,
            .n = out,
            .k = in,
            .k2 = rank,
            .batch = 1,
            .a = {NULL, in, false},
            .b = {NULL, out, false},
            .a2 = {NULL, rank, false},
            .b2 = {NULL, out, false},
            .ldc = out,
            .precision = s->precision,
            .variant = variant,
        };
        return tile_check(f, ctx, &c, ahead);
    }
    size_t m = s->dim[0], n = s->dim[1], k = s->dim[2];
    const hd_fused_tile_call c = {
        .m = m,
        .n = n,
        .k = k,
        .batch = op == HD_OP_GEMM_BATCHED ? s->dim[3] : 1,
        .a = {NULL, s->trans_a ? m : k, s->trans_a},
        .b = {NULL, s->trans_b ? k : n, s->trans_b},
        .ldc = n,
        .precision = s->precision,
        .variant = variant,
    };
    return tile_check(f, ctx, &c, ahead);
}

/* The strip kernels' check of variant: their rows (tokens) and rank, no transposes, and the
 * parameters as gemm.c and lora.c read them. */
static hd_status strip_check_variant(hd_fused *f, hd_context *ctx, hd_op op, const hd_shape *s,
                                     const char *variant)
{
    hd_fused_params p;
    if (op == HD_OP_GEMM) {
        if (s->dim[0] > HD_FUSED_MAX_ROWS || s->trans_a || s->trans_b)
            return hd__error(ctx, HD_ERR_UNSUPPORTED,
                             "fused: GEMM takes at most %d rows and no transposes",
                             HD_FUSED_MAX_ROWS);
        return hd__fused_gemv_params(f, ctx, variant, s->dim[1], s->dim[2], s->dim[0], NULL, &p);
    }
    const hd_lora_args lora = {
        .tokens = s->dim[0], .in = s->dim[1], .out = s->dim[2], .rank = s->dim[3]};
    if (lora.tokens > HD_FUSED_MAX_ROWS || lora.rank > HD_FUSED_MAX_RANK)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: LoRA forward takes at most %d tokens and rank %d",
                         HD_FUSED_MAX_ROWS, HD_FUSED_MAX_RANK);
    return hd__fused_gemv_params(f, ctx, variant, lora.out, lora.in, lora.tokens, &lora, &p);
}

/* The parameter checks of the family the variant names (hd__fused_route), without the build;
 * with ahead, the program of a variant on the tiled engine is queued on the build-ahead
 * workers too (the other kernels' programs are few, and built at their first call). Callers
 * check named variants; NULL is checked as the empty variant, which names no tile parameters. */
static hd_status check_variant(hd_fused *f, hd_context *ctx, hd_op op, const hd_shape *s,
                               hd_part part, const char *variant, bool ahead)
{
    hd_fused_params p;
    bool cached;
    switch (hd__fused_route(f, op, s, part, variant != NULL ? variant : "")) {
    case HD_FUSED_ROUTE_EPILOGUE: { /* the epilogue of a plan of two: LoRA's low-rank term */
        const hd_lora_args l = {.tokens = s->dim[0],
                                .in = s->dim[1],
                                .out = s->dim[2],
                                .rank = s->dim[3],
                                .variant = variant};
        return hd__fused_lora_update_check(f, ctx, &l);
    }
    case HD_FUSED_ROUTE_TILE:
        return tile_check_variant(f, ctx, op, s, variant, ahead);
    case HD_FUSED_ROUTE_STRIP:
        return strip_check_variant(f, ctx, op, s, variant);
    case HD_FUSED_ROUTE_ROWS:
    case HD_FUSED_ROUTE_ROWS_BACKWARD: /* the row kernels' parameters, as rows_backward.c reads
                                          them */
        return hd__fused_rows_params(f, ctx, variant, s->dim[1], &p, &cached);
    case HD_FUSED_ROUTE_STEP:
        return hd__fused_step_check(f, ctx, op, s, variant);
    case HD_FUSED_ROUTE_NONE:
        if (part == HD_PART_EPILOGUE)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "fused: %s has no epilogue",
                             hd_op_name(op));
        break;
    case HD_FUSED_ROUTE_DOT:        /* named by no variant */
    case HD_FUSED_ROUTE_FEW_TOKENS: /* likewise */
        break;
    }
    return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "fused: %s takes no variants", hd_op_name(op));
}

static hd_status fused_check_variant(void *state, hd_context *ctx, hd_op op, const hd_shape *s,
                                     hd_part part, const char *variant)
{
    return check_variant(state, ctx, op, s, part, variant, false);
}

static hd_status fused_build_ahead(void *state, hd_context *ctx, hd_op op, const hd_shape *s,
                                   hd_part part, const char *variant)
{
    return check_variant(state, ctx, op, s, part, variant, true);
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
            hd_kernel *k;
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
        hd_kernel *k;
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
        hd_kernel *k;
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

/* One launch, then the larger of compute and streaming time, at the rate of the family the
 * router's rules give (a product past the dot form's 32-bit indexing, which the tiled engine
 * runs, is priced as the dot form). The epilogue of LoRA reads x, A, B and y and writes y: its
 * arithmetic is the low-rank product alone. */
static double fused_estimate_us(void *state, hd_op op, const hd_shape *s, hd_part part,
                                const hd_tune_calibration *cal)
{
    double launch = cal != NULL && cal->launch_us > 0.0 ? cal->launch_us : DEFAULT_LAUNCH_US;
    double gflops =
        cal != NULL && cal->gemm_gflops > 0.0 ? cal->gemm_gflops : DEFAULT_DEVICE_GFLOPS;
    double gbps = cal != NULL && cal->copy_gbps > 0.0 ? cal->copy_gbps : DEFAULT_DEVICE_GBPS;
    double flops = hd__op_flops(op, s), bytes = hd__op_bytes(op, s);
    if (part == HD_PART_EPILOGUE) {
        double t = (double)s->dim[0], in = (double)s->dim[1], out = (double)s->dim[2];
        double r = (double)s->dim[3];
        flops = 2.0 * t * r * (in + out);
        bytes = 4.0 * (t * in + in * r + r * out + 2.0 * t * out);
    }
    if (!hd__op(op)->compute_bound)
        return launch + bytes / (gbps * 1e3);
    hd_fused_route route = hd__fused_route(state, op, s, part, NULL);
    bool strip = part == HD_PART_EPILOGUE || route == HD_FUSED_ROUTE_STRIP ||
                 route == HD_FUSED_ROUTE_DOT;
    double tile_gflops =
        cal != NULL && cal->fused_gflops > 0.0 ? cal->fused_gflops : gflops * TILE_RATE_FRACTION;
    double rate = strip ? gflops * GEMV_RATE_FRACTION : tile_gflops;
    /* LoRA's backward: five products, six with W and A transposed apart (lora_backward.c) */
    bool apart = !(s->lora_layout & HD_LORA_TRANS_W) != !(s->lora_layout & HD_LORA_TRANS_A);
    double launches = op != HD_OP_LORA_BACKWARD ? 1.0 : apart ? 6.0 : 5.0;
    return launches * launch + fmax(flops / (rate * 1e3), bytes / (gbps * 1e3));
}

static hd_status fused_gemm(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__fused_gemm(state, ctx, &args->gemm);
}
static hd_status fused_gemm_batched(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__fused_gemm_batched(state, ctx, &args->gemm);
}
static hd_status fused_lora(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__fused_lora(state, ctx, &args->lora);
}
static hd_status fused_lora_epilogue(void *state, hd_context *ctx, const hd_op_args *args)
{
    return args->lora.rank > 0 ? hd__fused_lora_update(state, ctx, &args->lora) : HD_OK;
}
/* t = beta * t on the device, so that GEMM with k = 0 or alpha = 0 stays there and does not
 * wait, with or without CLBlast; beta = 0 fills zeros (BLAS: C is not read). */
static hd_status fused_scale(void *state, hd_context *ctx, const hd_tensor *t, float beta)
{
    hd_fused *f = state;
    if (beta == 0.0f)
        return hd__rt_zero(f->rt, ctx, t->state->device->mem, t->rows * t->cols * sizeof(float));
    return hd__fused_scale_rows(f, ctx, t->state->device->mem, t->rows, t->cols, beta);
}

static hd_status fused_lora_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__fused_lora_backward(state, ctx, &args->lora_backward);
}

static hd_status fused_softmax(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__fused_softmax(state, ctx, &args->row);
}
static hd_status fused_layer_norm(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__fused_layer_norm(state, ctx, &args->row);
}
static hd_status fused_rms_norm(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__fused_rms_norm(state, ctx, &args->row);
}

static hd_status fused_softmax_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__fused_softmax_backward(state, ctx, &args->row_backward);
}
static hd_status fused_layer_norm_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__fused_layer_norm_backward(state, ctx, &args->row_backward);
}
static hd_status fused_rms_norm_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__fused_rms_norm_backward(state, ctx, &args->row_backward);
}

const hd_backend_impl hd__backend_fused = {
    .name = "fused",
    .id = HD_BACKEND_FUSED,
    .place = HD_PLACE_DEVICE,
    .probe = fused_probe,
    .destroy = fused_destroy,
    .supports = fused_supports,
    .estimate_us = fused_estimate_us,
    .variants = fused_variants,
    .runs_precision = fused_runs_precision,
    .check_variant = fused_check_variant,
    .build_ahead = fused_build_ahead,
    .warmup = fused_warmup,
    .scale = fused_scale,
    .run =
        {
            [HD_OP_GEMM] = fused_gemm,
            [HD_OP_GEMM_BATCHED] = fused_gemm_batched,
            [HD_OP_LORA] = fused_lora,
            [HD_OP_SOFTMAX] = fused_softmax,
            [HD_OP_LAYER_NORM] = fused_layer_norm,
            [HD_OP_RMS_NORM] = fused_rms_norm,
            [HD_OP_SOFTMAX_BACKWARD] = fused_softmax_backward,
            [HD_OP_LAYER_NORM_BACKWARD] = fused_layer_norm_backward,
            [HD_OP_RMS_NORM_BACKWARD] = fused_rms_norm_backward,
            [HD_OP_LORA_BACKWARD] = fused_lora_backward,
            [HD_OP_SWIGLU] = hd__fused_swiglu,
            [HD_OP_SWIGLU_BACKWARD] = hd__fused_swiglu_backward,
            [HD_OP_GELU] = hd__fused_gelu,
            [HD_OP_GELU_BACKWARD] = hd__fused_gelu_backward,
            [HD_OP_ADD] = hd__fused_add,
            [HD_OP_ROPE] = hd__fused_rope,
            [HD_OP_EMBEDDING] = hd__fused_embedding,
            [HD_OP_ATTENTION] = hd__fused_attention,
            [HD_OP_ATTENTION_BACKWARD] = hd__fused_attention_backward,
            [HD_OP_ADD_RMS_NORM] = hd__fused_add_rms_norm,
            [HD_OP_ADD_RMS_NORM_BACKWARD] = hd__fused_add_rms_norm_backward,
            [HD_OP_CROSS_ENTROPY] = hd__fused_cross_entropy,
            [HD_OP_LINEAR_CROSS_ENTROPY] = hd__fused_linear_cross_entropy,
        },
    .epilogue = {[HD_OP_LORA] = fused_lora_epilogue},
    .adamw = hd__fused_adamw,
};
