/* The LoRA forward pass on the family the router gives (route.c): for few tokens the strip
 * kernels of lora.cl (one launch), in PyTorch's layout the dot form of few_rows.c (two
 * launches); for more tokens, or where a tuned variant names it, the tiled GEMM engine (two
 * launches); and the epilogue y += scale * (x*A) * B for any number of tokens
 * (lora_update.cl), one launch. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "backends/fused/fused.h"
#include "backends/fused/internal.h"

/* Both kernels index with 32-bit ints within a matrix (row offsets of x and y in size_t). */
static bool fits_int(size_t a, size_t b)
{
    return b == 0 || a <= (size_t)INT_MAX / b;
}

bool hd__fused_lora_update_supports(const hd_shape *shape)
{
    size_t tokens = shape->dim[0], in = shape->dim[1], out = shape->dim[2], rank = shape->dim[3];
    return rank <= HD_FUSED_MAX_RANK && tokens <= INT_MAX && fits_int(16, in) &&
           fits_int(16, out) && fits_int(in, rank) && fits_int(rank, out);
}

size_t hd__fused_lora_update_variants(const hd_shape *shape, const char **out, size_t max)
{
    static const char *const all[] = {
        "WG=256 MR=8", "WG=256 MR=16", "WG=128 MR=4", "WG=256 MR=4", "WG=512 MR=8", "WG=128 MR=16",
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && n < max; i++)
        out[n++] = all[i];
    (void)shape;
    return n;
}

/* Arguments common to both kernels: tokens, in, out, r, rp, scale. */
static hd_status set_sizes(hd_context *ctx, hd_kernel *k, const hd_lora_args *l)
{
    int32_t v[5] = {(int32_t)l->tokens, (int32_t)l->in, (int32_t)l->out, (int32_t)l->rank,
                    (int32_t)hd__fused_pow2_ceil(l->rank == 0 ? 1 : l->rank)};
    hd_status s = HD_OK;
    for (uint32_t i = 0; i < 5 && s == HD_OK; i++)
        s = hd__fused_set_arg(ctx, k, i, sizeof v[i], &v[i]);
    float scale = l->scale;
    if (s == HD_OK)
        s = hd__fused_set_arg(ctx, k, 5, sizeof scale, &scale);
    return s;
}

static hd_status set_mems(hd_context *ctx, hd_kernel *k, uint32_t first, const hd_devmem *mems,
                          uint32_t count)
{
    hd_status s = HD_OK;
    for (uint32_t i = 0; i < count && s == HD_OK; i++)
        s = hd__fused_set_arg(ctx, k, first + i, sizeof mems[i], &mems[i]);
    return s;
}

/* The partials of lora_xa: HD_FUSED_MAX_SPLIT blocks of MR (<= HD_FUSED_MAX_ROWS) rows of
 * HD_FUSED_MAX_RANK floats, allocated once. In-order queue: a later call's lora_xa runs after
 * this call's reader. */
static hd_status lora_part_buffer(hd_fused *f, hd_context *ctx, hd_devmem *out)
{
    if (f->lora_part == NULL) {
        size_t bytes =
            (size_t)HD_FUSED_MAX_SPLIT * HD_FUSED_MAX_ROWS * HD_FUSED_MAX_RANK * sizeof(float);
        hd_status s = hd__rt_scratch_create(f->rt, ctx, bytes, "LoRA partials", &f->lora_part);
        if (s != HD_OK)
            return s;
    }
    *out = f->lora_part;
    return HD_OK;
}

/* lora_xa into the partials buffer, split ways over the rows of A; *parts: groups launched. */
static hd_status launch_xa(hd_fused *f, hd_context *ctx, const hd_lora_args *l, const char *options,
                           size_t group, int split, hd_devmem part, int32_t *parts)
{
    hd_kernel *k;
    hd_status s = hd__fused_kernel(f, ctx, HD_FUSED_LORA, options, "lora_xa", group, &k);
    if (s != HD_OK)
        return s;
    size_t chunk = (l->in + (size_t)split - 1) / (size_t)split;
    *parts = (int32_t)((l->in + chunk - 1) / chunk);
    int32_t v[5] = {(int32_t)l->tokens, (int32_t)l->in, (int32_t)l->rank,
                    (int32_t)hd__fused_pow2_ceil(l->rank), (int32_t)chunk};
    for (uint32_t i = 0; i < 5 && s == HD_OK; i++)
        s = hd__fused_set_arg(ctx, k, i, sizeof v[i], &v[i]);
    hd_devmem mems[3] = {hd__fused_mem(l->x), hd__fused_mem(l->a), part};
    if (s == HD_OK)
        s = set_mems(ctx, k, 5, mems, 3);
    return s == HD_OK ? hd__fused_launch(f, ctx, k, (size_t)*parts, group) : s;
}

/* Scratch for u = scale * x * A (tokens x rank) of the tiled path, grown on demand; the
 * in-order queue runs a later call's writer after this call's reader. */
static hd_status lora_u_buffer(hd_fused *f, hd_context *ctx, size_t floats, hd_devmem *out)
{
    size_t bytes = floats * sizeof(float);
    if (bytes > f->lora_u_bytes) {
        hd__rt_scratch_free(f->rt, f->lora_u);
        f->lora_u_bytes = 0;
        hd_status s = hd__rt_scratch_create(f->rt, ctx, bytes, "LoRA x*A", &f->lora_u);
        if (s != HD_OK)
            return s;
        f->lora_u_bytes = bytes;
    }
    *out = f->lora_u;
    return HD_OK;
}

/* Many tokens on the tiled GEMM engine: u = scale * x * A in one launch, then
 * y = x * W + u * B in one more, the low-rank product summed in the same tiles as x * W
 * (k extended by the rank), so y is written once. Transposed weights are read in place. */
static hd_status lora_tiled(hd_fused *f, hd_context *ctx, const hd_lora_args *l)
{
    size_t tokens = l->tokens, in = l->in, out = l->out, rank = l->rank;
    hd_devmem x = hd__fused_mem(l->x), u = NULL;
    hd_status s;
    if (rank > 0) {
        if ((s = lora_u_buffer(f, ctx, tokens * rank, &u)) != HD_OK)
            return s;
        hd_fused_tile_call xa = {.m = tokens,
                                 .n = rank,
                                 .k = in,
                                 .batch = 1,
                                 .alpha = l->scale,
                                 .beta = 0.0f,
                                 .a = {x, in, false},
                                 .b = {hd__fused_mem(l->a), l->trans_a ? in : rank, l->trans_a},
                                 .c = u,
                                 .ldc = rank,
                                 .precision = l->precision};
        if ((s = hd__fused_tile_gemm(f, ctx, &xa)) != HD_OK)
            return s;
    }
    hd_fused_tile_call y = {.m = tokens,
                            .n = out,
                            .k = in,
                            .batch = 1,
                            .alpha = 1.0f,
                            .beta = 0.0f,
                            .a = {x, in, false},
                            .b = {hd__fused_mem(l->w), l->trans_w ? in : out, l->trans_w},
                            .c = hd__fused_mem(l->y),
                            .ldc = out,
                            .k2 = rank,
                            .precision = l->precision,
                            .variant = l->variant};
    if (rank > 0) {
        y.a2 = (hd_fused_operand){u, rank, false};
        y.b2 = (hd_fused_operand){hd__fused_mem(l->b), l->trans_b ? rank : out, l->trans_b};
    }
    return hd__fused_tile_gemm(f, ctx, &y);
}

/* Few tokens with W and B stored transposed (PyTorch's layout) on the dot form of the few-row
 * kernels (few_rows.c): u = scale * x * op(A) in one launch (the dot form where A is stored r x
 * in, the strip kernel where in x r), then y = x * W^T + u * B^T in one more, which reads W
 * once at full bandwidth, as the default layout's one-launch kernel does, where the tiled
 * engine would take a tile of rows for each token. HD_ERR_UNSUPPORTED, nothing queued, where
 * the few-row kernels refuse the sizes. */
static hd_status lora_dot_form(hd_fused *f, hd_context *ctx, const hd_lora_args *l)
{
    hd_devmem u = NULL;
    hd_status s;
    if (l->rank > 0 && (s = lora_u_buffer(f, ctx, l->tokens * l->rank, &u)) != HD_OK)
        return s;
    hd_fused_rows_call xa = {.m = l->tokens,
                             .n = l->rank,
                             .k = l->in,
                             .alpha = l->scale,
                             .beta = 0.0f,
                             .a = hd__fused_mem(l->x),
                             .b = l->rank > 0 ? hd__fused_mem(l->a) : NULL,
                             .c = u,
                             .b_trans = l->trans_a};
    hd_fused_rows_call y = {.m = l->tokens,
                            .n = l->out,
                            .k = l->in,
                            .k2 = l->rank,
                            .alpha = 1.0f,
                            .beta = 0.0f,
                            .a = hd__fused_mem(l->x),
                            .b = hd__fused_mem(l->w),
                            .a2 = u,
                            .b2 = l->rank > 0 ? hd__fused_mem(l->b) : NULL,
                            .c = hd__fused_mem(l->y),
                            .b_trans = true};
    if ((l->rank > 0 && (s = hd__fused_rows_prepare(f, ctx, &xa)) != HD_OK) ||
        (s = hd__fused_rows_prepare(f, ctx, &y)) != HD_OK)
        return s;
    if (l->rank > 0 && (s = hd__fused_rows_gemm(f, ctx, &xa)) != HD_OK)
        return s;
    return hd__fused_rows_gemm(f, ctx, &y);
}

/* Few tokens in the default layout on the strip kernels of lora.cl: x*A and y = x*W + u*B in
 * one pass over W, or x*A split over work-groups in a launch of its own (SPLIT). */
static hd_status lora_strip(hd_fused *f, hd_context *ctx, const hd_lora_args *l)
{
    if (l->tokens > HD_FUSED_MAX_ROWS || l->rank > HD_FUSED_MAX_RANK)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: LoRA forward takes at most %d tokens and rank %d",
                         HD_FUSED_MAX_ROWS, HD_FUSED_MAX_RANK);
    hd_fused_params p;
    hd_status s = hd__fused_gemv_params(f, ctx, l->variant, l->out, l->in, l->tokens, l, &p);
    if (s != HD_OK)
        return s;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd__fused_options(HD_FUSED_FAMILY_GEMV, &p, l->tokens, options);
    /* several tokens in strips as wide as the rank rounded up: x*A during the pass over W */
    if (p.split == 0 && l->tokens > 1 && l->rank > 0 &&
        hd__fused_pow2_ceil(l->rank) <= (size_t)p.tn) {
        size_t used = strlen(options);
        snprintf(options + used, sizeof options - used, " -DXA_IN_PASS=1");
    }
    size_t group = (size_t)p.tn * (size_t)p.ks;
    hd_kernel *k;
    s = hd__fused_kernel(f, ctx, HD_FUSED_LORA, options,
                         p.split > 0 ? "lora_forward_split" : "lora_forward", group, &k);
    if (s != HD_OK)
        return s;
    /* Rank 0: A and B hold nothing and may have no device storage; the kernel never reads
     * them, but every argument needs a valid buffer. */
    hd_devmem w = hd__fused_mem(l->w);
    hd_devmem mems[5] = {hd__fused_mem(l->x), w, l->rank ? hd__fused_mem(l->a) : w,
                         l->rank ? hd__fused_mem(l->b) : w, hd__fused_mem(l->y)};
    if (p.split > 0) {
        int32_t parts = 0;
        if ((s = lora_part_buffer(f, ctx, &mems[2])) != HD_OK ||
            (s = launch_xa(f, ctx, l, options, group, p.split, mems[2], &parts)) != HD_OK)
            return s;
        /* lora_forward_split takes the number of partials where lora_forward takes rp */
        if ((s = set_sizes(ctx, k, l)) != HD_OK ||
            (s = hd__fused_set_arg(ctx, k, 4, sizeof parts, &parts)) != HD_OK)
            return s;
    } else if ((s = set_sizes(ctx, k, l)) != HD_OK) {
        return s;
    }
    size_t nv = l->out / (size_t)p.vec;
    size_t strips = (nv + (size_t)p.tn - 1) / (size_t)p.tn;
    hd_devmem scratch[2];
    if ((s = set_mems(ctx, k, 6, mems, 5)) != HD_OK ||
        (s = hd__fused_kg_buffers(f, ctx, &p, strips, l->tokens, w, &scratch[0], &scratch[1])) !=
            HD_OK ||
        (s = set_mems(ctx, k, 11, scratch, 2)) != HD_OK)
        return s;
    return hd__fused_launch(f, ctx, k, strips * (size_t)p.kg, group);
}

hd_status hd__fused_lora(void *state, hd_context *ctx, const hd_lora_args *l)
{
    hd_fused *f = state;
    hd_lora_args call = *l;
    const hd_shape shape = {.dim = {l->tokens, l->in, l->out, l->rank},
                            .lora_layout = (l->trans_w ? HD_LORA_TRANS_W : 0u) |
                                           (l->trans_a ? HD_LORA_TRANS_A : 0u) |
                                           (l->trans_b ? HD_LORA_TRANS_B : 0u),
                            .precision = l->precision};
    hd_fused_route route = hd__fused_route(f, HD_OP_LORA, &shape, HD_PART_WHOLE, l->variant);
    if (shape.lora_layout != 0) {
        /* The tiled engine and the dot form read transposed weights in place, each taking
         * its second product (u*B) with the transposes of its first (x*W): W and B
         * transposed alike, as PyTorch stores them. */
        if (l->trans_w != l->trans_b)
            return hd__error(ctx, HD_ERR_UNSUPPORTED,
                             "fused: LoRA reads W and B transposed only together");
        if (route == HD_FUSED_ROUTE_STRIP) { /* a strip variant tuned for the default layout */
            call.variant = NULL;
            route = hd__fused_route(f, HD_OP_LORA, &shape, HD_PART_WHOLE, NULL);
        }
    }
    if (route == HD_FUSED_ROUTE_DOT) {
        hd_status s = lora_dot_form(f, ctx, &call);
        if (s != HD_ERR_UNSUPPORTED)
            return s;
        hd__error_clear(ctx); /* sizes past the few-row kernels: the tiled engine */
        route = HD_FUSED_ROUTE_TILE;
    }
    return route == HD_FUSED_ROUTE_TILE ? lora_tiled(f, ctx, &call) : lora_strip(f, ctx, &call);
}

/* The epilogue's checks: the device, the shape and the parameters, into p. */
static hd_status update_accepts(hd_fused *f, hd_context *ctx, const hd_lora_args *l,
                                hd_fused_params *p)
{
    hd_shape shape = {.dim = {l->tokens, l->in, l->out, l->rank}};
    if (f == NULL || f->rt == NULL)
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE, "fused: no OpenCL device");
    if (!hd__fused_lora_update_supports(&shape))
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: the LoRA epilogue takes rank <= %d and 32-bit indexable sizes",
                         HD_FUSED_MAX_RANK);
    return hd__fused_update_params(f, ctx, l->variant, l->out, p);
}

hd_status hd__fused_lora_update_check(void *fused_state, hd_context *ctx, const hd_lora_args *l)
{
    hd_fused_params p;
    return update_accepts(fused_state, ctx, l, &p);
}

hd_status hd__fused_lora_update_prepare(void *fused_state, hd_context *ctx, const hd_lora_args *l,
                                        hd_fused_update *out)
{
    *out = (hd_fused_update){.kernel = NULL};
    hd_fused *f = fused_state;
    hd_fused_params p;
    hd_status s = update_accepts(f, ctx, l, &p);
    if (s != HD_OK || l->tokens == 0 || l->in == 0 || l->out == 0 || l->rank == 0)
        return s;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd__fused_options(HD_FUSED_FAMILY_UPDATE, &p, 0, options);
    hd_kernel *k;
    s = hd__fused_kernel(f, ctx, HD_FUSED_LORA_UPDATE, options, "lora_update", (size_t)p.wg, &k);
    if (s != HD_OK)
        return s;
    hd_devmem mems[4] = {hd__fused_mem(l->x), hd__fused_mem(l->a), hd__fused_mem(l->b),
                         hd__fused_mem(l->y)};
    if ((s = set_sizes(ctx, k, l)) != HD_OK || (s = set_mems(ctx, k, 6, mems, 4)) != HD_OK)
        return s;
    *out = (hd_fused_update){.kernel = k,
                             .groups = (l->tokens + (size_t)p.mr - 1) / (size_t)p.mr,
                             .group = (size_t)p.wg};
    return HD_OK;
}

hd_status hd__fused_lora_update_enqueue(void *fused_state, hd_context *ctx,
                                        const hd_fused_update *u)
{
    if (u->kernel == NULL)
        return HD_OK;
    return hd__fused_launch(fused_state, ctx, u->kernel, u->groups, u->group);
}

hd_status hd__fused_lora_update(void *fused_state, hd_context *ctx, const hd_lora_args *l)
{
    hd_fused_update u;
    hd_status s = hd__fused_lora_update_prepare(fused_state, ctx, l, &u);
    return s == HD_OK ? hd__fused_lora_update_enqueue(fused_state, ctx, &u) : s;
}
